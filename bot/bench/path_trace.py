"""Which production modules one message runs through, measured by running it in one process.

The stack: the gateway with the real Slack adapter talking to :class:`~bot.testing.FakeSlack`
over loopback, the fake model (:class:`~bot.testing.FakeOpenAI` with a
:class:`~bot.testing.ScriptedModel`), a private :class:`~bot.testing.RedisServer`, and an RQ
``SimpleWorker`` in a thread of this process that executes the turn and subagent jobs. Default
settings otherwise. A profile hook (``sys.setprofile`` and ``threading.setprofile``, set before
any thread starts) records the file of every Python function called or resumed, in every
thread, while a window is open. What it counts:

- **spawn**: one Slack mention whose turn calls ``sessions_spawn`` once; the window opens
  when the event is pushed to the fake and closes when the fake has accepted the run's
  announce (a post naming the subagent's result). One such round runs first, unmeasured,
  so first-use imports and caches do not count.
- **stop**: ``/subagents stop <seq>`` in that thread, sent while a second subagent hangs in
  its model call; the window closes when the fake has accepted both the command's reply and
  the stopped run's announce.
- **store calls of the stop**: Redis commands sent (sync and async clients, each command of
  a pipeline or transaction counted, ``EVALSHA`` as one) while a frame of a module under
  ``bot/commands/`` is on the calling stack, during the stop window; with the round trips
  they took and the commands naming the run's record key (``…run:<id>``), of which reads
  are every command but plain writes.

A module counts when any code of it ran in a window, in any thread: background loops of the
gateway and the worker that happened to run then are in the figure too. Production modules
are the ``.py`` files of ``bot/`` (without ``bot/testing``, ``bot/bench``, ``bot/demo``),
``adapters/`` and ``workers/``. Nothing depends on module names but the entry points that
:mod:`bot.testing` and the worker expose, so an older tree is measured the same way.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bot.bench.code_map import PRODUCTION_ROOTS, is_production

MENTION_TIMEOUT = 60.0


@dataclass(frozen=True, kw_only=True)
class StoreCalls:
    """Redis traffic of one window (see the module docstring for what is counted)."""

    commands: int
    round_trips: int
    run_record: int
    run_reads: int
    names: tuple[str, ...]
    window_commands: int


@dataclass(frozen=True, kw_only=True)
class PathReport:
    """Production files executed in each window, relative to the tree's root."""

    spawn: tuple[str, ...]
    stop: tuple[str, ...]
    stop_store: StoreCalls
    announce: str


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
class _Send:
    """One send: its commands, the outermost production function on the stack and whether
    a frame under the scope was on it."""

    commands: tuple[tuple[str, ...], ...]
    entry: object
    in_scope: bool


@dataclass
class _Sent:
    sends: list[_Send] = field(default_factory=list)
    total: int = 0

    def handled(self) -> list[_Send]:
        """The sends whose outermost production function also reached the scope."""
        entries = {s.entry for s in self.sends if s.in_scope}
        return [s for s in self.sends if s.entry in entries]


class CommandCounter:
    """Counts commands redis-py connections send, sync and async, while :attr:`on`, each
    send with where it came from (see :meth:`_Sent.handled`)."""

    def __init__(self, *, scope: Path, production: tuple[str, ...]) -> None:
        self.scope = str(scope)
        self.production = production
        self.on = False
        self.sent = _Sent()
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
        self.sent.sends.append(_Send(texts, entry, in_scope))

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
    def window(self) -> Iterator[_Sent]:
        self.sent, self.on = _Sent(), True
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


def store_calls(sent: _Sent, *, run_id: str) -> StoreCalls:
    """What the handling of one message sent (see the module docstring)."""
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


class InProcessWorker:
    """RQ ``SimpleWorker`` bursts over fanbot's queues, in a thread of this process."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="bench-worker", daemon=True)

    def _loop(self) -> None:
        import redis
        from rq import Queue, SimpleWorker
        from rq.serializers import JSONSerializer
        from rq.timeouts import TimerDeathPenalty

        from workers import jobs, launcher

        jobs.warm_up(self.settings, trace=False)

        class Worker(SimpleWorker):
            death_penalty_class = TimerDeathPenalty  # SIGALRM works in the main thread only

            def _install_signal_handlers(self) -> None:  # not the main thread
                pass

        conn = redis.Redis.from_url(self.settings.redis_url)
        names = launcher.DEFAULT_QUEUES
        queues = [Queue(n, connection=conn, serializer=JSONSerializer) for n in names]
        worker = Worker(queues, connection=conn, serializer=JSONSerializer)
        while not self.stopping.is_set():
            worker.work(burst=True, with_scheduler=False, logging_level="WARNING")
            self.stopping.wait(0.02)
        conn.close()

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.thread.join(timeout)


def _script() -> Any:
    from bot.testing import Call, ChatRequest, Hang, ScriptedModel, Text, ToolCalls, is_subagent

    def main(request: ChatRequest) -> Text | ToolCalls:
        asked = re.search(r"please spawn (\w+)\s*$", request.last_user_message)
        if asked is None:
            return Text("Noted.")
        if request.last_role == "tool":
            return Text(f"Started {asked[1]}.")
        return ToolCalls([Call("sessions_spawn", {"task": f"{asked[1]} task", "label": asked[1]})])

    def sub(request: ChatRequest) -> Text | Hang:
        if "hang task" in request.last_user_message:
            return Hang(30)
        return Text(f"result of {request.last_user_message}")

    return ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, sub)


async def _until(check: Callable[[], bool], what: str, timeout: float = MENTION_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"fanbot bench map: no {what} after {timeout:.0f} s")
        await asyncio.sleep(0.01)


def _posts(slack: Any, root: str, needle: str) -> list[Any]:
    return [m for m in slack.messages if m.thread_ts == root and needle in m.text]


async def _trace(server_url: str, recorder: Recorder, counter: CommandCounter) -> PathReport:
    from adapters.slack import build
    from bot.config import Settings
    from bot.testing import FakeOpenAI, FakeSlack, Stack

    root_dir = checkout_root()
    async with FakeOpenAI(_script()) as model, FakeSlack(echo_bot_messages=True) as slack:
        slack_values = {"bot_token": slack.bot_token, "app_token": slack.app_token,
                        "signing_secret": slack.signing_secret, "api_url": slack.api_url}  # fmt: skip
        values = {"redis_url": server_url, "slack": slack_values,
                  "openai": {"base_url": model.base_url, "model": "fake-model"}}  # fmt: skip
        settings = Settings(**values)  # type: ignore[arg-type]
        worker = InProcessWorker(settings)
        async with Stack(values=values, adapters=[build(settings)], workers=0) as stack:
            await slack.wait_connected()
            worker.start()
            try:
                mention = f"<@{slack.bot_user_id}>"

                async def spawn(topic: str) -> tuple[str, Any]:
                    event = slack.app_mention(text=f"{mention} please spawn {topic}")
                    await slack.push_event(event)
                    needle = f"result of {topic} task"
                    await _until(lambda: bool(_posts(slack, event["ts"], needle)), "announce")
                    return event["ts"], _posts(slack, event["ts"], needle)[0]

                await spawn("warm")
                with recorder.window() as spawn_files:
                    thread, announce = await spawn("alpha")
                event = slack.message(text=f"{mention} please spawn hang", thread_ts=thread)
                await slack.push_event(event)
                deps = stack.gateway.deps  # type: ignore[union-attr]
                await _until(lambda: _running(deps, "hang") is not None, "running hang run")
                # The turn's reply and the run's status card are out before the stop.
                await _until(lambda: len(_posts(slack, thread, "hang")) >= 2, "card and reply")
                run = _running(deps, "hang")
                before = len(slack.messages)
                stop = slack.message(text=f"/subagents stop {run.seq}", thread_ts=thread)
                with recorder.window() as stop_files, counter.window() as sent:
                    await slack.push_event(stop)
                    await _until(lambda: _stop_answered(slack, before, thread), "stop reply")
            finally:
                await asyncio.to_thread(worker.stop, 5.0)
    return PathReport(
        spawn=_production(spawn_files, root_dir),
        stop=_production(stop_files, root_dir),
        stop_store=store_calls(sent, run_id=run.run_id),
        announce=announce.text,
    )


def _running(deps: Any, label: str) -> Any:
    from bot.types import RunStatus

    for run_id in deps.runs.active_ids():
        record = deps.runs.get(run_id)
        if record is not None and record.label == label and record.status is RunStatus.RUNNING:
            return record
    return None


def _stop_answered(slack: Any, before: int, thread: str) -> bool:
    """The command's reply and the stopped run's announce: two posts in the thread that
    say "stopped"."""
    new = [m for m in slack.messages[before:] if m.thread_ts == thread]
    return sum("stopped" in m.text.casefold() for m in new) >= 2


def _production(files: set[str], root: Path) -> tuple[str, ...]:
    found = set()
    for name in files:
        path = Path(name)
        if path.is_absolute() and is_production(path, root):
            found.add(path.relative_to(root).as_posix())
    return tuple(sorted(found))


def trace_paths() -> PathReport:
    """Run the stack once and measure both windows (this process; takes a few seconds)."""
    from bot.testing import RedisServer

    root = checkout_root()
    production = tuple(f"{root / top}/" for top in PRODUCTION_ROOTS)
    recorder = Recorder()
    counter = CommandCounter(scope=root / "bot" / "commands", production=production)
    with (
        tempfile.TemporaryDirectory(prefix="fanbot-map-") as tmp,
        RedisServer(data_dir=Path(tmp)) as server,
        recorder.installed(),
        counter.installed(),
    ):
        return asyncio.run(_trace(server.url, recorder, counter))


def checkout_root() -> Path:
    """The checkout whose ``bot`` package runs here."""
    return Path(sys.modules["bot"].__file__ or "").resolve().parent.parent
