"""Redis commands per subagent run, spawn -> announce delivered (``fanbot bench commands``).

The stack: the gateway in this process with a :class:`~bot.testing.MemoryChannel`, forked
``fanbot worker`` processes (:class:`~bot.testing.Stack`, default settings, the fork pool
unless asked), the fake model answering at once, and a private ``redis-server``. One run
is spawned at a time, each after the previous one's announce was accepted by the channel
(or ``burst`` runs at once, each in a thread of its own, then the next burst once all of
them announced: the slots fill up and runs wait in line); a first run warms everything up
unmeasured.

What is counted is what Redis executed, counted by :mod:`bot.bench.redis_commands` (as
``fanbot bench compare``'s commands row counts it): the delta of ``INFO commandstats`` over
the window (every command, those a Lua script calls included, RQ's own too; ``INFO``
itself not), minus the idle traffic of the same stack (its background loops: egress,
status cards, the maintenance sweep, RQ's worker heartbeats) measured for
``idle_seconds`` before, scaled to the window's length; divided by the runs. The window
ends ``settle_seconds`` after the last announce, so what a run writes after its announce
(the card's last edit, RQ's own end of the job) counts too.

How a run is spawned (``via``):

- ``command``: ``/subagents spawn <task>`` in a new thread: the command's handling and
  reply, the run, its status card and its announce.
- ``turn``: a message whose turn calls ``sessions_spawn`` once (``subagents.announce =
  cards``, so no continuation turn follows): the turn's own commands count too.

The breakdown by code comes from ``MONITOR`` over the same window (not subtracted for the
idle traffic, so a loop that ran meanwhile shows): each command a script called is listed
under the script (named after the owner's attribute that holds it, or ``finalize``), the
others under their key's family (``fanbot:run:…:hb``, ``rq:job``).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import pkgutil
import re
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import redis

from bot.bench import BENCH_LIMITS, redis_commands

Via = Literal["command", "turn"]
TASK = "count the commands"
RUN_TIMEOUT = 60.0


@dataclass(frozen=True, kw_only=True)
class RunCommands:
    """Redis commands per run (idle traffic subtracted) and where they came from.

    Attributes:
        runs: Runs measured.
        per_command: Calls per run of each command (lower case, as ``INFO`` names them;
            :func:`~bot.bench.redis_commands.per_unit`).
        seconds: The window's length.
        idle_per_second: Commands per second of the idle stack.
        sites: ``(site, command)`` -> calls per run seen by ``MONITOR`` in the window
            (idle not subtracted; see the module docstring).
        how: How the runs were spawned, for the report (``", 8 at once"``).
    """

    runs: int
    per_command: Mapping[str, float]
    seconds: float
    idle_per_second: float
    sites: Mapping[tuple[str, str], float] = field(default_factory=dict)
    how: str = ""

    @property
    def total(self) -> float:
        return redis_commands.total(self.per_command)

    def lines(self, *, sites: bool = True) -> list[str]:
        """The figure, the commands by count (as ``fanbot bench compare`` lists them, every
        one), and (``sites``) the breakdown by code."""
        out = [
            f"Redis commands per subagent run, spawn -> announce delivered: {self.total:.1f} "
            f"({self.runs} runs in {self.seconds:.1f} s{self.how}; idle "
            f"{self.idle_per_second:.1f}/s subtracted)",
            f"  by command: {redis_commands.top(self.per_command, count=None)}",
        ]
        if sites and self.sites:
            out.append("  by code (MONITOR, idle not subtracted):")
            per_site: dict[str, float] = {}
            for (site, _command), n in self.sites.items():
                per_site[site] = per_site.get(site, 0.0) + n
            for site, n in sorted(per_site.items(), key=lambda kv: -kv[1]):
                if n < 0.05:
                    continue
                here = {c: v for (s, c), v in self.sites.items() if s == site}
                out.append(f"  {n:6.1f}  {site}: {redis_commands.top(here, count=None)}")
        return out


# -- the breakdown by code ---------------------------------------------------------------------

_ID = re.compile(r"[0-9a-f]{16,}|\d|^turn-|^agent$")


def key_family(key: str) -> str:
    """``fanbot:run:<id>:hb`` -> ``fanbot:run:…:hb``, ``rq:job:<id>`` -> ``rq:job`` (pure):
    a key's leading words, and its last one when that is a word too."""
    segments = key.split(":")
    head: list[str] = []
    for segment in segments[:3]:
        if not segment or _ID.search(segment) or len(segment) > 16:
            break
        head.append(segment)
    family = ":".join(head) or "?"
    last = segments[-1]
    if len(segments) > len(head) and last and not _ID.search(last) and len(last) <= 12:
        family += f":…:{last}"
    return family


def script_names() -> dict[str, str]:
    """SHA1 -> name of every Lua script of :mod:`bot.store` (``Owner.attribute``, and
    ``finalize`` for the finalize script)."""
    import bot.store
    from bot.store.finalize_script import assemble
    from bot.store.owner import Lua
    from bot.store.runs import END_RUN

    names = {_sha(assemble(END_RUN)): "finalize"}
    for info in pkgutil.iter_modules(bot.store.__path__):
        module = importlib.import_module(f"bot.store.{info.name}")
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            for attribute, value in vars(cls).items():
                if isinstance(value, Lua):
                    names[_sha(value.text)] = f"{cls.__name__}.{attribute.lstrip('_')}"
    return names


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass(frozen=True)
class Seen:
    """One command ``MONITOR`` showed: when, whether a script called it, and its words."""

    at: float
    scripted: bool
    words: tuple[str, ...]


def attribute(seen: Iterable[Seen], scripts: Mapping[str, str]) -> Counter[tuple[str, str]]:
    """``(site, command)`` counts (pure): a script's call is counted under the script (it
    is ``EVALSHA`` or ``EVAL`` itself, and the commands after it that it called), any other
    command under its first key's :func:`key_family`."""
    counts: Counter[tuple[str, str]] = Counter()
    script = "?"
    for item in seen:
        if not item.words:
            continue
        command = item.words[0].upper()
        if item.scripted:
            counts[(f"script {script}", command)] += 1
            continue
        if command in ("EVALSHA", "EVAL") and len(item.words) > 1:
            sha = item.words[1] if command == "EVALSHA" else _sha(item.words[1])
            script = scripts.get(sha, sha[:8])
            counts[(f"script {script}", command)] += 1
            continue
        words = [w.upper() for w in item.words]
        at = words.index("STREAMS") + 1 if "STREAMS" in words else 1  # XREAD, XREADGROUP
        key = item.words[at] if len(item.words) > at else ""
        counts[(key_family(key) if key else "-", command)] += 1
    return counts


class Monitor:
    """``MONITOR`` on its own connection, in a thread, while :attr:`on`."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.seen: list[Seen] = []
        self.on = False
        self._monitor: Any = None
        self._thread = threading.Thread(target=self._read, name="bench-monitor", daemon=True)
        self._ready = threading.Event()

    def start(self) -> Monitor:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _read(self) -> None:
        monitor = self._monitor = self.client.monitor()  # type: ignore[no-untyped-call]
        monitor.connection = monitor.connection_pool.get_connection()
        monitor.connection.send_command("MONITOR")
        monitor.connection.read_response()
        self._ready.set()
        try:
            while True:
                line = monitor.next_command()
                if self.on:
                    words = tuple(str(line["command"]).split(" "))
                    self.seen.append(Seen(line["time"], line["client_type"] == "lua", words))
        except Exception:  # stop() cut the connection
            return

    def stop(self) -> None:
        if self._monitor is not None and self._monitor.connection is not None:
            self._monitor.connection.disconnect()
        self._thread.join(5)
        self.client.close()


# -- the run ----------------------------------------------------------------------------------


def _model() -> Any:
    from bot.testing import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent

    def main(request: ChatRequest) -> Text | ToolCalls:
        if request.last_role == "tool":
            return Text("Started.")
        return ToolCalls([Call("sessions_spawn", {"task": TASK, "label": "count"})])

    return (
        ScriptedModel(default=Text("ok"))
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, Text("counted"))
    )


async def measure(
    redis_url: str,
    *,
    runs: int = 20,
    via: Via = "command",
    workers: int = 2,
    burst: int = 1,
    pool: str = "fork",
    idle_seconds: float = 10.0,
    settle_seconds: float = 2.0,
    monitor: bool = True,
) -> RunCommands:
    """Measure on the Redis at ``redis_url`` (a private one: its whole traffic is counted).
    ``burst``: spawn that many runs at once (each in its thread), then wait for their
    announces, and so on (1: one run at a time)."""
    from bot.testing import FakeOpenAI, MemoryChannel, Stack, until

    client = redis.Redis.from_url(redis_url)
    watch = Monitor(redis_url).start() if monitor else None
    try:
        async with FakeOpenAI(_model(), models=["fake-model"]) as model:
            values: dict[str, Any] = {
                "redis_url": redis_url,
                "openai": {"base_url": model.base_url, "model": "fake-model"},
                "subagents": {"announce": "cards"}
                if via == "turn"
                else {"max_spawns_per_turn": 200},
                "limits": BENCH_LIMITS,  # one person's many runs: checked, out of the way
                "workers": {"pool": pool},
            }
            channel = MemoryChannel()
            async with Stack(values=values, adapters=[channel], workers=workers):

                async def spawn(names: list[str]) -> None:
                    done = len(channel.announces) + len(names)
                    text = "please spawn" if via == "turn" else f"/subagents spawn {TASK}"
                    for name in names:
                        await channel.say(text, thread=channel.thread(name))
                    await until(lambda: len(channel.announces) >= done, timeout=RUN_TIMEOUT)

                await spawn(["warm-up"])
                await asyncio.sleep(settle_seconds)
                started = redis_commands.start(client)
                await asyncio.sleep(idle_seconds)  # the stack's loops run meanwhile
                idle = started.window(client)
                if watch is not None:
                    watch.on = True
                started = redis_commands.start(client)
                for first in range(0, runs, burst):
                    await spawn([f"run-{i}" for i in range(first, min(runs, first + burst))])
                await asyncio.sleep(settle_seconds)
                window = started.window(client)
                if watch is not None:
                    watch.on = False
    finally:
        if watch is not None:
            watch.stop()
        client.close()
    sites = attribute(watch.seen, script_names()) if watch is not None else Counter()
    return RunCommands(
        runs=runs,
        per_command=redis_commands.per_unit(window, idle, runs),
        seconds=window.seconds,
        idle_per_second=idle.per_second,
        sites={k: v / runs for k, v in sites.items()},
        how=f", {burst} at once" if burst > 1 else "",
    )


def run_measure(**options: Any) -> RunCommands:
    """:func:`measure` on a private ``redis-server`` it starts and stops."""
    from bot.redis.server import RedisServer

    with (
        tempfile.TemporaryDirectory(prefix="fanbot-commands-") as tmp,
        RedisServer(data_dir=Path(tmp)) as server,
    ):
        return asyncio.run(measure(server.url, **options))
