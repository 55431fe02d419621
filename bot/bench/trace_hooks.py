"""The instruments of :mod:`bot.bench.path_trace`: a profile hook that records which code
files run, and a counter of the Redis commands redis-py sends, with where each came from.

Both are switched on for a window (``with x.window() as seen: ...``) after being installed
for the whole run (``with x.installed(): ...``), so threads started in between are seen too.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any


@dataclass(frozen=True, kw_only=True)
class StoreCalls:
    """Redis traffic of one window (see :mod:`bot.bench.path_trace` for what is counted)."""

    commands: int
    round_trips: int
    run_record: int
    run_reads: int
    names: tuple[str, ...]
    window_commands: int


class Recorder:
    """A profile hook: the code files of every Python call while :attr:`on`."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()

    def __call__(self, frame: FrameType, event: str, _arg: object) -> None:
        if self.on and event == "call":
            self.files.add(frame.f_code.co_filename)

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        sys.setprofile(self)
        threading.setprofile(self)
        try:
            yield self
        finally:
            threading.setprofile(None)
            sys.setprofile(None)

    @contextmanager
    def window(self) -> Iterator[set[str]]:
        seen: set[str] = set()
        self.files, self.on = seen, True
        try:
            yield seen
        finally:
            self.on = False


@dataclass(frozen=True)
class Send:
    """One send: its commands, the outermost production function on the stack and whether
    a frame under the scope was on it."""

    commands: tuple[tuple[str, ...], ...]
    entry: object
    in_scope: bool


@dataclass
class Sent:
    sends: list[Send] = field(default_factory=list)
    total: int = 0

    def handled(self) -> list[Send]:
        """The sends whose outermost production function also reached the scope."""
        entries = {s.entry for s in self.sends if s.in_scope}
        return [s for s in self.sends if s.entry in entries]


class CommandCounter:
    """Counts commands redis-py connections send, sync and async, while :attr:`on`, each
    send with where it came from (see :meth:`Sent.handled`)."""

    def __init__(self, *, scope: Path, production: tuple[str, ...]) -> None:
        self.scope = str(scope)
        self.production = production
        self.on = False
        self.sent = Sent()
        self._local = threading.local()

    def _count(self, commands: list[tuple[Any, ...]]) -> None:
        """One round trip of ``commands``."""
        if not self.on:
            return
        self.sent.total += len(commands)
        entry: object = None
        in_scope = False
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(self.production):
                entry = frame.f_code
                in_scope = in_scope or name.startswith(self.scope)
            frame = frame.f_back
        texts = tuple(tuple(_text(a) for a in c) for c in commands)
        self.sent.sends.append(Send(texts, entry, in_scope))

    @contextmanager
    def installed(self) -> Iterator[CommandCounter]:
        import redis.asyncio.connection as aconn
        import redis.connection as sconn

        counter, local = self, self._local
        sync_one: Any = sconn.AbstractConnection.send_command
        sync_many: Any = sconn.AbstractConnection.pack_commands
        async_one, async_many = (
            aconn.AbstractConnection.pack_command,
            aconn.AbstractConnection.pack_commands,
        )

        def s_one(conn: Any, *args: Any, **options: Any) -> Any:
            counter._count([args])
            return sync_one(conn, *args, **options)

        def s_many(conn: Any, commands: Any) -> Any:
            commands = list(commands)
            counter._count(commands)
            return sync_many(conn, commands)

        def a_one(conn: Any, *args: Any) -> Any:
            if not getattr(local, "many", False):  # not a_many's own calls
                counter._count([args])
            return async_one(conn, *args)

        def a_many(conn: Any, commands: Any) -> Any:
            commands = list(commands)
            counter._count(commands)
            local.many = True
            try:
                return async_many(conn, commands)
            finally:
                local.many = False

        patches = [(sconn.AbstractConnection, "send_command", s_one),
                   (sconn.AbstractConnection, "pack_commands", s_many),
                   (aconn.AbstractConnection, "pack_command", a_one),
                   (aconn.AbstractConnection, "pack_commands", a_many)]  # fmt: skip
        saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in patches]
        for cls, name, fn in patches:
            setattr(cls, name, fn)
        try:
            yield self
        finally:
            for cls, name, fn in saved:
                setattr(cls, name, fn)

    @contextmanager
    def window(self) -> Iterator[Sent]:
        self.sent, self.on = Sent(), True
        try:
            yield self.sent
        finally:
            self.on = False


def _text(value: Any) -> str:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


_WRITES = frozenset(
    {"HSET", "HMSET", "HSETNX", "HDEL", "DEL", "UNLINK", "SET", "EXPIRE", "PEXPIRE", "HINCRBY",
     "HINCRBYFLOAT"}
)  # fmt: skip


def store_calls(sent: Sent, *, run_id: str) -> StoreCalls:
    """What the handling of one message sent (see :mod:`bot.bench.path_trace`)."""
    record = re.compile(rf"(^|:)run:{re.escape(run_id)}$")
    handled = sent.handled()
    commands = [c for s in handled for c in s.commands if c]
    naming = [c for c in commands if any(record.search(a) for a in c[1:])]
    reads = [c for c in naming if c[0].upper() not in _WRITES]
    return StoreCalls(
        commands=len(commands),
        round_trips=len(handled),
        run_record=len(naming),
        run_reads=len(reads),
        names=tuple(c[0].upper() for c in commands),
        window_commands=sent.total,
    )
