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
  so first-use imports and caches do not count; each round waits for the continuation turn
  that follows an announce (the default ``subagents.announce``) before the next window.
- **idle**: a window as long as the spawn's, once everything has settled: the background
  loops (egress, status cards, Redis watch) that run anyway.
- **stop**: ``/subagents stop <seq>`` in that thread, sent while a second subagent hangs in
  its model call; the window closes when the fake has accepted both the command's reply and
  the stopped run's announce (two posts in the thread that say "stopped").
- **store calls of the stop**: Redis commands sent during the stop window (sync and async
  clients; each command of a pipeline or transaction counted; ``EVALSHA`` as one) from a
  call stack whose outermost production function is one that, in this window, also reached
  a module under ``bot/commands/``: the gateway's handling of the command message, from
  its entry on (dedupe, session, the command, the reply), not the egress or the worker.
  Round trips are the sends (a pipeline is one); the run's record is "named" by a command
  with its key (``…run:<id>``) among the arguments, and "read" by those that are not plain
  writes (``HSET``, ``DEL``, ``EXPIRE``…; a script counts as a read).

A module counts when any code of it ran in a window, in any thread: background loops of the
gateway and the worker that happened to run then are in the figure too (the report says how
many of the modules also run when idle), so the counts move by a module or two from one
run to the next: compare two trees over a few runs each. Production modules are the ``.py`` files of
``bot/`` (without ``bot/testing``, ``bot/bench``, ``bot/demo``), ``adapters/`` and
``workers/``. Nothing depends on module names but the entry points that :mod:`bot.testing`
and the worker expose (``adapters.slack.build``, ``workers.jobs.warm_up``,
``workers.launcher.DEFAULT_QUEUES``), so an older tree is measured the same way.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.bench.code_map import PRODUCTION_ROOTS, is_production
from bot.bench.trace_hooks import CommandCounter, Recorder, StoreCalls, store_calls

MENTION_TIMEOUT = 60.0


@dataclass(frozen=True, kw_only=True)
class PathReport:
    """Production files executed in each window, relative to the tree's root."""

    spawn: tuple[str, ...]
    idle: tuple[str, ...]
    stop: tuple[str, ...]
    stop_store: StoreCalls
    announce: str


def _serving() -> Callable[[Any], AbstractContextManager[Any]]:
    """How a job is served the worker's context (an older checkout, measured for a
    before/after figure, has no ``workers.context``: its jobs find their stores themselves)."""
    try:
        from workers.context import serving
    except ImportError:
        return lambda _context: nullcontext()
    return serving


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

        context = jobs.warm_up(self.settings, trace=False)
        serving = _serving()

        class Worker(SimpleWorker):
            death_penalty_class = TimerDeathPenalty  # SIGALRM works in the main thread only

            def _install_signal_handlers(self) -> None:  # not the main thread
                pass

        conn = redis.Redis.from_url(self.settings.redis_url)
        names = launcher.DEFAULT_QUEUES
        queues = [Queue(n, connection=conn, serializer=JSONSerializer) for n in names]
        worker = Worker(queues, connection=conn, serializer=JSONSerializer)
        with serving(context):
            while not self.stopping.is_set():
                worker.work(burst=True, with_scheduler=False, logging_level="WARNING")
                self.stopping.wait(0.02)
        conn.close()
        close = getattr(context, "close", None)  # an older checkout's warm-up returns stores
        if callable(close):
            close()

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.thread.join(timeout)


def _script(release: asyncio.Event) -> Any:
    """The main agent spawns ``x`` on "please spawn x"; a subagent answers at once, but the
    one whose task is "hang task" waits for ``release``."""
    from bot.testing import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent

    def main(request: ChatRequest) -> Text | ToolCalls:
        asked = re.search(r"please spawn (\w+)\s*$", request.last_user_message)
        if asked is None:
            return Text("Noted.")
        if request.last_role == "tool":
            return Text(f"Started {asked[1]}.")
        return ToolCalls([Call("sessions_spawn", {"task": f"{asked[1]} task", "label": asked[1]})])

    async def sub(request: ChatRequest) -> Text:
        if "hang task" in request.last_user_message:
            await asyncio.wait_for(release.wait(), MENTION_TIMEOUT)
        return Text(f"result of {request.last_user_message}")

    return ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, sub)


async def _until(check: Callable[[], bool], what: str, timeout: float = MENTION_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"fanbot bench map: no {what} after {timeout:.0f} s")
        await asyncio.sleep(0.01)


@dataclass
class _Scene:
    """The fake Slack workspace and the gateway's stores, seen from the bench."""

    slack: Any
    deps: Any
    recorder: Recorder
    counter: CommandCounter

    def posts(self, thread: str, needle: str) -> list[Any]:
        return [m for m in self.slack.messages if m.thread_ts == thread and needle in m.text]

    async def say(self, text: str, *, thread: str | None = None) -> str:
        """Post ``@fanbot <text>`` (at the channel's root without ``thread``); its ts."""
        mention = f"<@{self.slack.bot_user_id}> {text}"
        make = self.slack.app_mention if thread is None else self.slack.message
        event = make(text=mention, **({"thread_ts": thread} if thread else {}))
        await self.slack.push_event(event)
        return str(event["ts"])

    async def spawn(self, topic: str) -> tuple[str, str]:
        """A new thread whose turn spawns ``topic``; its ts and the announce's text."""
        thread = await self.say(f"please spawn {topic}")
        needle = f"result of {topic} task"
        await _until(lambda: bool(self.posts(thread, needle)), "announce")
        return thread, self.posts(thread, needle)[0].text

    async def settled(self, thread: str) -> None:
        """The continuation turn that follows an announce (by default) has answered."""
        await _until(lambda: bool(self.posts(thread, "Noted.")), "continuation")
        await asyncio.sleep(1.0)

    async def running(self, thread: str) -> Any:
        """Spawn "hang" in ``thread``; its record once it runs and its card and the turn's
        reply are out."""
        await self.say("please spawn hang", thread=thread)
        await _until(lambda: _running(self.deps, "hang") is not None, "running hang run")
        await _until(lambda: len(self.posts(thread, "hang")) >= 2, "card and reply")
        return _running(self.deps, "hang")

    async def stop(self, thread: str, seq: int) -> None:
        """``/subagents stop <seq>``, until its reply and the run's announce are out."""
        before = len(self.slack.messages)
        event = self.slack.message(text=f"/subagents stop {seq}", thread_ts=thread)
        await self.slack.push_event(event)
        await _until(lambda: _stop_answered(self.slack, before, thread), "stop reply")

    async def measure(self, root: Path) -> PathReport:
        await self.settled((await self.spawn("warm"))[0])
        t0 = time.monotonic()
        with self.recorder.window() as spawn_files:
            thread, announce = await self.spawn("alpha")
        took = time.monotonic() - t0
        await self.settled(thread)
        with self.recorder.window() as idle_files:
            await asyncio.sleep(took)
        run = await self.running(thread)
        with self.recorder.window() as stop_files, self.counter.window() as sent:
            await self.stop(thread, run.seq)
        return PathReport(
            spawn=_production(spawn_files, root),
            idle=_production(idle_files, root),
            stop=_production(stop_files, root),
            stop_store=store_calls(sent, run_id=run.run_id),
            announce=announce,
        )


async def _trace(server_url: str, recorder: Recorder, counter: CommandCounter) -> PathReport:
    from adapters.slack import build
    from bot.config import Settings
    from bot.testing import FakeOpenAI, FakeSlack, Stack

    release = asyncio.Event()
    async with FakeOpenAI(_script(release)) as model, FakeSlack(echo_bot_messages=True) as slack:
        slack_values = {"bot_token": slack.bot_token, "app_token": slack.app_token,
                        "signing_secret": slack.signing_secret, "api_url": slack.api_url}  # fmt: skip
        values = {"redis_url": server_url, "slack": slack_values,
                  "openai": {"base_url": model.base_url, "model": "fake-model"}}  # fmt: skip
        settings = Settings(**values)  # type: ignore[arg-type]
        worker = InProcessWorker(settings)
        async with Stack(values=values, adapters=[build(settings)], workers=0) as stack:
            assert stack.gateway is not None
            await slack.wait_connected()
            worker.start()
            try:
                scene = _Scene(slack=slack, deps=stack.gateway.deps, recorder=recorder,
                               counter=counter)  # fmt: skip
                return await scene.measure(checkout_root())
            finally:
                release.set()  # the hanging run returns; its job ends; the worker stops
                await asyncio.to_thread(worker.stop, MENTION_TIMEOUT)


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
