"""``fanbot console``: private Redis, workers, gateway and a terminal chat in one command.

With no model endpoint configured it serves the offline demo model (:mod:`bot.demo`) on a
loopback port and says so in a banner. ``FANBOT_DEMO_SUBAGENT_DELAY`` (seconds) sets how
long each demo subagent takes, to watch the live area or try Ctrl-C on runs in flight.

One console per state directory: it is locked (``console.lock``) for the console's life;
a second console on the same directory is refused (exit 2) rather than sharing, or worse
shutting down, the first one's Redis.

Quitting:

* **Ctrl-D** (end of input) waits for the turns and runs in flight, then exits 0.
* **Ctrl-C** (or SIGTERM) stops them: every unfinished run ends ``stopped`` with its
  partial result and announces it here, the turn being answered is hard-stopped, then the
  workers shut down, the gateway delivers what is left, and Redis stops last. A second
  Ctrl-C forces: whatever still runs is killed. Exit 130 either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from adapters.console.channel import ConsoleChannel
from adapters.console.convert import LiveRun, LiveView, thread_ref
from bot.config import Settings, demo_delay
from bot.console.live_runs import InFlight, in_flight, stop_in_flight, stopping_line, waiting_line
from bot.console.procs import Interrupts, WorkerGroup
from bot.console.threads import known_threads
from bot.demo import ChatServer, demo_model
from bot.demo.model import DEMO_MODEL, SUBAGENTS_HINT
from bot.deps import Deps
from bot.errors import DirectoryBusy
from bot.failpoints import Failpoints
from bot.gateway.runtime import Gateway
from bot.redis.connect import connect
from bot.redis.server import RedisServer
from bot.runs.naming import run_title
from bot.sessions import requester_session_key
from bot.supervise.aio import TrackedExecutor
from bot.supervise.dirlock import DirLock
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)

OFFLINE_BANNER = (
    "⚠ No model endpoint configured (FANBOT_OPENAI__BASE_URL / OPENAI_API_KEY): using the "
    "OFFLINE SCRIPTED DEMO MODEL. Answers are canned; fan-out, progress and announces are real."
)
WELCOME = "fanbot console — type a message; Ctrl-D to finish, Ctrl-C to quit."
WORKERS_GRACE = 1.5
"""Seconds the workers get to exit after Ctrl-C before they are killed."""
DELIVERY_GRACE = 1.5
"""Seconds the gateway gets to print the announces of the runs Ctrl-C stopped."""
THREADS_GRACE = 2.0
"""Seconds the calls still running in threads get to return before the private Redis stops."""
LIVE_EVERY = 0.5
RESET_EXTERNAL = (
    "fanbot console: --reset empties the console's private Redis; with --external-redis "
    "there is none (fanbot never flushes a Redis it did not start)."
)


def subagents_hint(redis_url: str | None) -> str:
    """The shell command that lists the console's runs from another shell (pure): it names
    the private Redis (``None``: the console uses FANBOT_REDIS_URL, as the command does)."""
    if redis_url is None:
        return SUBAGENTS_HINT
    return f"FANBOT_REDIS_URL={shlex.quote(redis_url)} {SUBAGENTS_HINT}"


def endpoints_line(host: str, port: int | None) -> str | None:
    """Where the console's health and metrics endpoints listen, in one line (pure)."""
    if port is None:
        return None
    return f"Health and metrics: http://{host}:{port}/healthz, /readyz, /metrics"


def busy_message(state: Path, pid: int | None) -> str:
    who = f" (pid {pid})" if pid else ""
    return (
        f"Another fanbot console is using {state}{who}; "
        f"use FANBOT_STATE_DIR={state}-2 for a second one."
    )


def session_prefix(agent_id: str) -> str:
    """What every console thread's session key starts with (pure)."""
    key = requester_session_key(agent_id=agent_id, thread=thread_ref("\0"))
    return key.partition("\0")[0]


def live_view(
    snapshot: InFlight, *, thread_of: Mapping[str, str], status_ids: Mapping[str, str]
) -> LiveView:
    """The live area for ``snapshot`` (pure): ``thread_of`` maps session keys to console
    threads, ``status_ids`` run ids to their status message ids."""
    line = {job_id: i for i, job_id in enumerate(snapshot.line, start=1)}

    def live(r: RunRecord) -> LiveRun:
        running = r.status is RunStatus.RUNNING
        return LiveRun(
            thread=thread_of.get(snapshot.roots.get(r.run_id, ""), ""),
            title=run_title(r, kind="tag"),
            running=running,
            since=(r.started_at or r.created_at) if running else r.created_at,
            position=line.get(r.job_id),
            status_id=status_ids.get(r.run_id),
        )

    thinking = frozenset(thread_of[k] for k in snapshot.turns if k in thread_of)
    # The runs still unfinished in this snapshot: one that just ended is no longer waited for.
    number = {r.run_id: r.seq for r in snapshot.runs}
    waiting = {
        thread_of[k]: numbers
        for k, state in snapshot.states.items()
        if k in thread_of
        and (numbers := tuple(sorted(number[i] for i in state.waiting_for if i in number)))
    }
    return LiveView(runs=tuple(live(r) for r in snapshot.runs), thinking=thinking, waiting=waiting)


async def run_console(
    settings: Settings,
    *,
    workers: int = 4,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    external_redis: bool = False,
    reset: bool = False,
) -> int:
    """Run the whole product locally until end of input (or Ctrl-C); the exit code.
    ``reset``: empty the private Redis first (every thread, run and run number)."""
    if reset and external_redis:
        print(RESET_EXTERNAL, file=sys.stderr, flush=True)
        return 2
    lock = DirLock(settings.state_dir / "console.lock")
    try:
        lock.acquire()
    except DirectoryBusy as exc:
        print(busy_message(settings.state_dir, exc.pid), file=sys.stderr, flush=True)
        return 2
    app = Console(settings, workers=workers, stdin=stdin, stdout=stdout)
    try:
        return await app.run(external_redis=external_redis, reset=reset)
    finally:
        lock.release()


@dataclass
class _Parts:
    redis: RedisServer | None = None
    demo: ChatServer | None = None
    workers: WorkerGroup | None = None
    gateway: Gateway | None = None
    live: asyncio.Task[None] | None = None


class Console:
    """One console session: starts the parts, chats, and takes them down in order."""

    def __init__(
        self, settings: Settings, *, workers: int, stdin: TextIO | None, stdout: TextIO | None
    ) -> None:
        self.settings = settings
        self.worker_count = workers
        self.failpoints = Failpoints.from_env()
        self.interrupts = Interrupts(on_press=self._pressed)
        self._threads = TrackedExecutor(thread_name_prefix="console")
        self.parts = _Parts()
        self._stopping_since: float | None = None
        self._gone = asyncio.Event()  # set when the worker launcher exits on its own
        self._watchdog: asyncio.Task[None] | None = None
        self.channel = ConsoleChannel(
            stdin=stdin,
            stdout=stdout,
            history=settings.state_dir / "console_history",
            on_interrupt=self.interrupts.press,
            known_threads=self._known_threads,
        )

    async def run(self, *, external_redis: bool, reset: bool = False) -> int:
        asyncio.get_running_loop().set_default_executor(self._threads)
        self.interrupts.install()
        try:
            await self._start(external_redis=external_redis, reset=reset)
            self._watchdog = asyncio.create_task(self._watch_workers(), name="console-workers")
            if not self.interrupts.first.is_set():
                await _first_of(self.channel.eof, self.interrupts.first, self._gone)
            if self._gone.is_set():
                return await self._say_workers_gone()
            if not self.interrupts.first.is_set():
                code = await self._finish()
                if code is not None:
                    return code
            await self._stop_in_flight()
            return 130
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
            await self._close()
            self.interrupts.remove()
            await self._say_stopped()

    # -- start -----------------------------------------------------------------------------

    async def _start(self, *, external_redis: bool, reset: bool) -> None:
        settings, parts = self.settings, self.parts
        state = settings.state_dir
        state.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        update: dict[str, object] = {}
        if not external_redis:
            parts.redis = await asyncio.to_thread(RedisServer(data_dir=state / "redis").start)
            env["FANBOT_REDIS_URL"] = update["redis_url"] = parts.redis.url
            if reset:
                await asyncio.to_thread(_flush, parts.redis)
                await self.channel.say(f"Reset: emptied the console's Redis in {state / 'redis'}.")
        if not settings.openai.configured:
            hint = subagents_hint(parts.redis.url if parts.redis else None)
            parts.demo = await self._start_demo(env, hint)
            # Its runs show the demo model's name, not the default model's (no endpoint).
            env["FANBOT_OPENAI__MODEL"] = DEMO_MODEL
            update["openai"] = settings.openai.model_copy(
                update={"base_url": parts.demo.base_url, "model": DEMO_MODEL}
            )
        if "http_port" not in settings.gateway.model_fields_set:
            # Never the gateway's 8080: a gateway started beside the console keeps it.
            update["gateway"] = settings.gateway.model_copy(update={"http_port": 0})
        self.settings = settings = settings.model_copy(update=update)
        parts.workers = WorkerGroup.start(
            env, count=self.worker_count, log_path=state / "workers.log"
        )
        parts.gateway = Gateway(
            settings=settings, adapters=[self.channel], failpoints=self.failpoints
        )
        await parts.gateway.start()
        port = parts.gateway.metrics_port or parts.gateway.http_port
        host = settings.observe.metrics_host or settings.gateway.http_host
        line = endpoints_line(host, port) if settings.observe.http_endpoints else None
        if line is not None:
            log.info("%s", line)
            await self.channel.say(line)
        await self.channel.say(WELCOME, style="bold")
        if self.channel.interactive:
            parts.live = asyncio.create_task(self._live(parts.gateway), name="console-live")

    async def _start_demo(self, env: dict[str, str], hint: str) -> ChatServer:
        delay = demo_delay()
        model = (
            demo_model(subagents_hint=hint)
            if delay is None
            else demo_model(subagent_delay=delay, subagents_hint=hint)
        )
        demo = await ChatServer(model, models=[DEMO_MODEL]).start()
        env["FANBOT_OPENAI__BASE_URL"] = demo.base_url
        await self.channel.say(OFFLINE_BANNER, style="yellow")
        return demo

    # -- while chatting --------------------------------------------------------------------

    def _sessions(self) -> dict[str, str]:
        """Session key -> console thread name, for every thread typed in so far."""
        agent = self.settings.agent_id
        return {
            requester_session_key(agent_id=agent, thread=thread_ref(t)): t
            for t in self.channel.threads
        }

    async def _known_threads(self) -> dict[str, tuple[int, int]]:
        gateway = self.parts.gateway
        if gateway is None:
            return {}
        return await asyncio.to_thread(
            known_threads, gateway.deps, session_prefix(self.settings.agent_id)
        )

    async def _snapshot(self, gateway: Gateway, *, live: bool = False) -> InFlight:
        return await asyncio.to_thread(
            _read_in_flight, gateway.deps, self._sessions(), live, self.failpoints
        )

    async def _live(self, gateway: Gateway) -> None:
        """Feed the live area: what runs, what waits and where, every half second."""
        store = gateway.progress.store
        while True:
            try:
                snapshot = await self._snapshot(gateway, live=True)
                ids = {r.run_id: await store.status_message(r.run_id) for r in snapshot.runs}
                status_ids = {run_id: i for run_id, i in ids.items() if i}
                view = live_view(snapshot, thread_of=self._sessions(), status_ids=status_ids)
                self.channel.show_live(view)
            except Exception:  # a Redis hiccup: the live area shows the last view a while
                log.debug("console live area: refresh failed", exc_info=True)
            await asyncio.sleep(LIVE_EVERY)

    # -- end of input: wait --------------------------------------------------------------

    async def _finish(self) -> int | None:
        """Wait for what is in flight; the exit code, or None when Ctrl-C cut it short."""
        assert self.parts.gateway is not None
        snapshot = await self._snapshot(self.parts.gateway)
        line = waiting_line(snapshot)
        if line and self.channel.interactive:
            await self.channel.say(line)
        limit = self.settings.subagents.run_timeout_seconds + self.settings.turn_timeout_seconds
        idle = asyncio.create_task(self._wait_idle(limit))
        await _first_of(idle, self.interrupts.first, self._gone)
        if self._gone.is_set():
            idle.cancel()
            return await self._say_workers_gone()
        if self.interrupts.first.is_set():
            idle.cancel()
            return None
        if not idle.result():
            await self.channel.say("(gave up waiting for unfinished runs)")
            return 1
        failed = self.channel.failed_turns
        if failed and not self.channel.interactive:  # a script learns it from the exit code
            await self.channel.say(f"{failed} turn{'s' if failed != 1 else ''} failed: exit 1.")
            return 1
        return 0

    async def _watch_workers(self) -> None:
        """Set ``_gone`` when the worker launcher exits on its own (it gives up on workers
        that cannot start), so the console says so instead of waiting in silence."""
        workers = self.parts.workers
        while workers is not None and workers.launcher.poll() is None:
            await asyncio.sleep(0.5)
        if not self.interrupts.first.is_set():
            self._gone.set()

    async def _say_workers_gone(self) -> int:
        log_path = self.settings.state_dir / "workers.log"
        await self.channel.say(
            f"The workers could not start, so nothing can run; the reason is in {log_path}."
        )
        return 2

    async def _wait_idle(self, limit: float) -> bool:
        """Wait until every turn and run started here has been delivered."""
        gateway = self.parts.gateway
        assert gateway is not None
        deadline = time.monotonic() + limit
        quiet = 0
        while time.monotonic() < deadline:
            pending = sum([await gateway.pending_work(k) for k in self._sessions()])
            quiet = quiet + 1 if pending == 0 else 0
            if quiet >= 3:
                return True
            await asyncio.sleep(0.2)
        return False

    # -- Ctrl-C: stop ----------------------------------------------------------------------

    def _pressed(self, presses: int) -> None:
        if presses == 1:
            self._stopping_since = time.monotonic()
        if presses == 2:
            log.warning("second Ctrl-C: forcing the shutdown")
            asyncio.get_running_loop().create_task(
                self.channel.say("Forcing: killing whatever still runs.")
            )

    async def _stop_in_flight(self) -> None:
        """Say what Ctrl-C stops, stop it, and let the workers exit and the announces of
        the stopped runs print, within the graces (a second Ctrl-C cuts them short)."""
        gateway, workers = self.parts.gateway, self.parts.workers
        if gateway is None or workers is None:
            return
        snapshot = await self._snapshot(gateway)
        await self.channel.say(stopping_line(snapshot))
        await asyncio.to_thread(stop_in_flight, gateway.deps, snapshot, by=self.interrupts.cause)
        force = self.interrupts.second
        clean, delivered = await asyncio.gather(
            workers.stop(grace=WORKERS_GRACE, force=force),
            _until(gateway.egress.drained, DELIVERY_GRACE, force),
        )
        took = time.monotonic() - (self._stopping_since or 0.0)
        log.info("Ctrl-C: workers down (%s), announces delivered: %s, after %.2fs",
                 "cleanly" if clean else "killed", delivered, took)  # fmt: skip

    async def _close(self) -> None:
        """Take the parts down in order: nothing writes to Redis once it stops."""
        parts = self.parts
        if parts.live is not None:
            parts.live.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await parts.live
        if parts.workers is not None:
            await parts.workers.stop(grace=WORKERS_GRACE, force=self.interrupts.second)
        if parts.gateway is not None:
            await parts.gateway.stop()
        if parts.demo is not None:
            await parts.demo.aclose()
        if parts.redis is not None:
            # A call still in a thread (a task cancelled above started it) would retry
            # against the stopped Redis for half a minute, and the process cannot exit
            # before it returns: let such calls finish first.
            if not await self._threads.idle(THREADS_GRACE):
                log.warning("%d calls still running as the private Redis stops", self._threads.busy)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(parts.redis.stop)
        log.info("console closed")

    async def _say_stopped(self) -> None:
        if self._stopping_since is None:
            return
        took = time.monotonic() - self._stopping_since
        how = "Forced to stop" if self.interrupts.second.is_set() else "Stopped"
        await self.channel.say(f"{how} in {took:.1f}s.")


def _flush(redis: RedisServer) -> None:
    """Empty the private Redis (``--reset``): it holds only this state directory's data."""
    client = connect(redis.url, socket_timeout=5, retries=0)
    try:
        client.flushall()
    finally:
        client.close()


def _read_in_flight(
    deps: Deps, sessions: Iterable[str], live: bool, failpoints: Failpoints
) -> InFlight:
    if live:  # a test holds a refresh here so that it is still reading as the console closes
        failpoints.hit("console.live")
    return in_flight(deps, sessions)


async def _first_of(*waitables: asyncio.Event | asyncio.Task[bool]) -> None:
    """Return once any event is set (or the task is done); a given task keeps running."""
    waiters: list[asyncio.Future[object]] = []
    for item in waitables:
        waiters.append(
            asyncio.ensure_future(item.wait()) if isinstance(item, asyncio.Event) else item
        )
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for item, waiter in zip(waitables, waiters, strict=True):
            if isinstance(item, asyncio.Event):
                waiter.cancel()


async def _until(
    condition: Callable[[], Awaitable[bool]], limit: float, force: asyncio.Event
) -> bool:
    """Poll ``condition`` until it is true, ``limit`` s pass or ``force`` is set."""
    deadline = time.monotonic() + limit
    while not force.is_set() and time.monotonic() < deadline:
        if await condition():
            return True
        await asyncio.sleep(0.05)
    return False
