"""What the phases of ``fanbot bench compare`` share: its settings, the fake model, the running
processes (:class:`BenchEnv`) and the helpers that spawn, wait and measure.

Both :mod:`bot.bench.compare` (the entry and the spawn phases) and :mod:`bot.bench.compare_phases`
import this module; neither imports the other's back.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rq import Queue, Worker
from rq.job import Job

from bot.bench import bare
from bot.bench.bench_stack import spawn_in_topic, stack_problem, threads_concurrency, wait_until
from bot.bench.stats import percentile
from bot.deps import Deps
from bot.errors import FanbotError
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import ChatRequest, Fail, Reply, Text
from bot.testing.stack import GatewayProcess, WorkerPool

FORUM = forum(-1001000000778, "compare")
TOPICS = range(200, 216)
_LABEL = re.compile(r"cmp task (cmp-\d+)")
_ANNOUNCED = re.compile(r"Status: (\w+)")
POLL = 0.02


class CompareError(FanbotError):
    """The comparison could not run (a process did not start, or a phase timed out)."""


PHASES = frozenset(
    {"spawn", "announce", "memory", "makespan", "throughput", "stop", "commands", "kill", "slope"}
)


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Knobs of one comparison (the CLI's options)."""

    workers: int = 8  # the cap; bare RQ workers; fork-pool workers
    pools: tuple[str, ...] = ("threads",)  # fanbot's worker pools, measured one after the other
    processes: int = 1  # threads pool: worker processes
    concurrency: int | None = None  # threads pool: runs per process (default: share + dequeuers)
    repeat: int = 3
    burst: int = 8  # spawns at once; runs finishing in one thread
    samples: int = 5  # single spawns per repetition
    makespan_runs: int = 100
    model_seconds: float = 2.0
    throughput_runs: int = 200
    kill: bool = True
    command_runs: int = 20  # runs (and bare jobs) whose Redis commands are counted
    idle_seconds: float = 6.0  # the idle traffic's window (three maintenance sweeps)
    slope_points: tuple[int, ...] = (0, 100, 200)  # runs at once in one threads-pool process
    only: frozenset[str] = PHASES  # which groups of figures to measure
    log_dir: Path
    report: Callable[[str], None] | None = None
    stopping: threading.Event | None = None  # set (SIGTERM, Ctrl-C): stop at the next wait

    @property
    def threads_concurrency(self) -> int:
        return self.concurrency or threads_concurrency(self.workers, self.processes)


class CompareModel:
    """The fake model's script: answers each run after ``delay``; holds the ``hold`` labels'
    calls open until :meth:`release`.

    Records when each run's first request arrived (``time.monotonic()``). It runs on the
    fakes' event loop; the phases (another thread) change ``hold`` before they spawn.
    """

    def __init__(self) -> None:
        self.delay = 0.0
        self.hold: set[str] = set()
        self.arrived: dict[str, float] = {}
        self._gates: dict[str, asyncio.Event] = {}

    def __call__(self, request: ChatRequest) -> Reply | Awaitable[Reply]:
        label = self.label_of(request)
        if label is None:
            return Fail(400, message="compare: a request that belongs to no run")
        self.arrived.setdefault(label, time.monotonic())
        if label in self.hold:
            return self._held(label)
        return Text(f"result of {label}", delay=self.delay)

    async def _held(self, label: str) -> Reply:
        await self._gates.setdefault(label, asyncio.Event()).wait()
        return Text(f"result of {label}")

    def release(self, loop: asyncio.AbstractEventLoop, labels: Iterable[str]) -> None:
        """Let the held calls of ``labels`` answer (from any thread)."""
        chosen = list(labels)

        def open_gates() -> None:
            for label in chosen:
                self.hold.discard(label)
                self._gates.pop(label, asyncio.Event()).set()

        loop.call_soon_threadsafe(open_gates)

    @staticmethod
    def label_of(request: ChatRequest) -> str | None:
        """The run label a request's task names (``cmp task cmp-00042: ...``)."""
        found = _LABEL.search(request.last_user_message)
        return found[1] if found else None


@dataclass(kw_only=True)
class BenchEnv:
    config: CompareConfig
    deps: Deps
    values: dict[str, Any]  # the settings the processes run with
    env: dict[str, str]  # their environment
    loop: asyncio.AbstractEventLoop  # the fakes' (pushing a Telegram update goes through it)
    side: str  # the pool being measured: "threads" or "fork"
    pool: WorkerPool
    bare: bare.BarePool
    gateway: GatewayProcess
    tg: FakeTelegram
    fake: FakeOpenAI
    model: CompareModel
    queue: Queue
    labels: int = 0
    ids: dict[str, str] = field(default_factory=dict)  # label -> run id
    topics: dict[str, int] = field(default_factory=dict)  # label -> forum topic
    announces: dict[str, tuple[float, str]] = field(default_factory=dict)  # see announced()
    calls_seen: int = 0
    figures: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # printed under the table

    @property
    def processes(self) -> int:
        """fanbot worker processes of the pool being measured."""
        return self.config.processes if self.side == "threads" else self.config.workers

    def add(self, row: str, side: str, value: float) -> None:
        self.figures.setdefault(row, {}).setdefault(side, []).append(value)

    def sample(self, row: str, side: str, values: Iterable[float]) -> None:
        """Keep the raw samples behind a figure (for the plot)."""
        self.samples.setdefault(row, {}).setdefault(side, []).extend(values)

    def detail(self, name: str, text: str) -> None:
        """A line under the table (the last repetition's, for each name)."""
        self.details[name] = text

    def run_ids(self, labels: Iterable[str]) -> list[str]:
        return [self.ids[label] for label in labels]

    def say(self, line: str) -> None:
        if self.config.report is not None:
            self.config.report(line)


QUIET_SECONDS = 1.0


def wait_quiet(bench: BenchEnv) -> None:
    """Until the gateway made no Telegram call but its long poll for :data:`QUIET_SECONDS`
    (an earlier phase's announces and status-card edits are out)."""

    def quiet() -> bool:
        busy = [c for c in bench.tg.calls[-50:] if c.method != "getUpdates"]
        return not busy or time.monotonic() - busy[-1].at >= QUIET_SECONDS

    _until(bench, quiet, timeout=60, what="the gateway to fall quiet")


def _until(bench: BenchEnv, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    wait_until(check, problem=lambda: _problem(bench), error=CompareError, timeout=timeout,
               what=what, poll=POLL)  # fmt: skip


def _require_alive(bench: BenchEnv) -> None:
    problem = _problem(bench)
    if problem is not None:
        raise CompareError(problem)


def _problem(bench: BenchEnv) -> str | None:
    return stack_problem(stopping=bench.config.stopping, gateway=bench.gateway, pool=bench.pool)


def _ready(bench: BenchEnv) -> bool:
    baseline = Worker.count(queue=bench.queue)
    polling = bool(bench.tg.calls_to("getUpdates"))
    return registered(bench) >= bench.processes and baseline >= bench.config.workers and polling


def registered(bench: BenchEnv) -> int:
    """Worker processes of the running fanbot pool that RQ knows (they take jobs)."""
    pids = set(bench.pool.worker_pids())
    queue = Queue(SUBAGENTS_QUEUE, connection=bench.deps.redis)
    return sum(worker.pid in pids for worker in Worker.all(queue=queue))


def spawn_runs(
    bench: BenchEnv,
    count: int,
    *,
    topic: int | None = None,
    hold: bool = False,
    deps: Deps | None = None,
) -> dict[str, float]:
    """Spawn ``count`` runs through ``sessions_spawn``'s path; ``label -> monotonic spawn``.

    ``hold``: their model calls stay open until :meth:`CompareModel.release`. ``deps``: spawn
    with other settings (another cap) than the benchmark's.
    """
    spawned = {}
    for n in range(count):
        bench.labels += 1
        label = f"cmp-{bench.labels:05d}"
        chosen = topic if topic is not None else TOPICS[n % len(TOPICS)]
        bench.topics[label] = chosen
        if hold:
            bench.model.hold.add(label)
        at = time.monotonic()
        bench.ids[label] = spawn_in_topic(
            deps or bench.deps, bot_id=bench.tg.bot_id, chat=FORUM["id"], topic=chosen,
            task=f"cmp task {label}: answer in one line", label=label,
        )  # fmt: skip
        spawned[label] = at
    return spawned


def announced(bench: BenchEnv, labels: Iterable[str]) -> dict[str, tuple[float, str]]:
    """``label -> (monotonic arrival at Telegram, status)`` of each run's first announce.

    Reads only the Telegram calls that arrived since the last look: the fakes serve from
    this process, and rescanning every call at each poll would slow them down.
    """
    calls = bench.tg.calls
    while bench.calls_seen < len(calls):
        call = calls[bench.calls_seen]
        bench.calls_seen += 1
        if call.status != 200 or call.method not in ("sendMessage", "editMessageText"):
            continue
        text = str(call.params.get("text", ""))
        status = _ANNOUNCED.search(text)
        hit = _LABEL_IN_TEXT.search(text) if status else None
        if status and hit and hit[0] not in bench.announces:
            bench.announces[hit[0]] = (call.at, status[1])
    return {label: bench.announces[label] for label in labels if label in bench.announces}


_LABEL_IN_TEXT = re.compile(r"cmp-\d{5}")


def wait_announced(bench: BenchEnv, labels: Iterable[str], *, timeout: float) -> dict[str, Any]:
    wanted = list(labels)
    _until(
        bench,
        lambda: len(announced(bench, wanted)) == len(wanted),
        timeout=timeout,
        what=f"{len(wanted)} announces",
    )
    return announced(bench, wanted)


def wait_jobs(bench: BenchEnv, jobs: list[Job], *, timeout: float) -> None:
    """Poll the jobs' statuses (one pipelined round trip per poll) until all ended."""

    def done() -> bool:
        with bench.deps.redis.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.hget(job.key, "status")
            statuses = pipe.execute()
        return all(s in (b"finished", b"failed") for s in statuses)

    _until(bench, done, timeout=timeout, what=f"{len(jobs)} bare jobs")


def last_ended(bench: BenchEnv, jobs: list[Job]) -> float:
    """The latest ``ended_at`` RQ wrote for ``jobs`` (wall clock)."""
    with bench.deps.redis.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.hget(job.key, "ended_at")
        stamps = pipe.execute()
    return max(
        datetime.fromisoformat(s.decode()).replace(tzinfo=UTC).timestamp() for s in stamps if s
    )


def p50(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def p99(values: Iterable[float]) -> float:
    return percentile(list(values), 0.99)


def pss(pids: Iterable[int]) -> int:
    """Proportional set size summed over the live ``pids`` (shared pages split fairly)."""
    import psutil

    total = 0
    for pid in pids:
        try:
            total += int(psutil.Process(pid).memory_full_info().pss)
        except psutil.NoSuchProcess:
            continue
    return total


def children(pids: Iterable[int]) -> list[int]:
    import psutil

    found = []
    for pid in pids:
        try:
            found += [c.pid for c in psutil.Process(pid).children()]
        except psutil.NoSuchProcess:
            continue
    return found


def wait_arrived(bench: BenchEnv, labels: Iterable[str], *, timeout: float = 60) -> None:
    """Every run of ``labels`` sent its first model request."""
    wanted = list(labels)
    _until(
        bench,
        lambda: all(label in bench.model.arrived for label in wanted),
        timeout=timeout,
        what=f"{len(wanted)} runs to reach the model",
    )


def sigkill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def ideal_makespan(config: CompareConfig) -> float:
    return math.ceil(config.makespan_runs / config.workers) * config.model_seconds
