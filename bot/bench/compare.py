"""``fanbot bench compare``: fanbot against bare RQ on one private Redis, in one run.

Processes: a private Redis; ``fanbot gateway`` with the Telegram channel pointed at
:class:`~bot.testing.fake_telegram.FakeTelegram`; ``--workers`` forked ``fanbot worker``
processes (``subagents.max_concurrent`` = workers); and as many plain RQ workers
(:mod:`bot.bench.bare`) on their own queue. The fake model and the fake Bot API run in this
process, so their clocks are this process's. Runs are created by the real spawn path
(:func:`bot.agent.spawn_tool.spawn`); the phases run one after the other, never side by side, so
fanbot and the baseline never compete for the cores. Each repetition measures every row of
:data:`bot.bench.compare_report.ROWS`; the table shows min / median / p99 over repetitions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import platform
import re
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rq import Queue, Worker
from rq.job import Job
from rq.serializers import JSONSerializer

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.bench import bare
from bot.bench.bench_stack import stack_problem, telegram_bench_values
from bot.bench.compare_report import CompareResult
from bot.bench.stats import percentile
from bot.config import Settings
from bot.deps import Deps
from bot.errors import FanbotError
from bot.redis.server import RedisServer
from bot.sessions import qualified_user, requester_session_key
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import ChatRequest, Fail, Hang, Reply, Text
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env
from bot.types import ThreadRef

FORUM = forum(-1001000000778, "compare")
TOPICS = range(200, 216)
_LABEL = re.compile(r"cmp task (cmp-\d+)")
_ANNOUNCED = re.compile(r"Status: (\w+)")
POLL = 0.02


class CompareError(FanbotError):
    """The comparison could not run (a process did not start, or a phase timed out)."""


PHASES = frozenset({"spawn", "announce", "memory", "makespan", "throughput", "kill"})


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """Knobs of one comparison (the CLI's options)."""

    workers: int = 8
    repeat: int = 3
    burst: int = 8  # spawns at once; runs finishing in one thread
    samples: int = 5  # single spawns per repetition
    makespan_runs: int = 100
    model_seconds: float = 2.0
    throughput_runs: int = 200
    kill: bool = True
    only: frozenset[str] = PHASES  # which groups of figures to measure
    log_dir: Path
    report: Callable[[str], None] | None = None
    stopping: threading.Event | None = None  # set (SIGTERM, Ctrl-C): stop at the next wait


class CompareModel:
    """The fake model's script: answers each run after ``delay``; hangs the ``hang`` labels.

    Records when each run's first request arrived (``time.monotonic()``).
    """

    def __init__(self) -> None:
        self.delay = 0.0
        self.hang: set[str] = set()
        self.arrived: dict[str, float] = {}

    def __call__(self, request: ChatRequest) -> Reply:
        label = self.label_of(request)
        if label is None:
            return Fail(400, message="compare: a request that belongs to no run")
        self.arrived.setdefault(label, time.monotonic())
        if label in self.hang:
            return Hang(300)
        return Text(f"result of {label}", delay=self.delay)

    @staticmethod
    def label_of(request: ChatRequest) -> str | None:
        """The run label a request's task names (``cmp task cmp-00042: ...``)."""
        found = _LABEL.search(request.last_user_message)
        return found[1] if found else None


@dataclass(kw_only=True)
class _Env:
    config: CompareConfig
    deps: Deps
    pool: WorkerPool
    bare: bare.BarePool
    gateway: GatewayProcess
    tg: FakeTelegram
    fake: FakeOpenAI
    model: CompareModel
    queue: Queue
    labels: int = 0
    ids: dict[str, str] = field(default_factory=dict)  # label -> run id
    announces: dict[str, tuple[float, str]] = field(default_factory=dict)  # see announced()
    calls_seen: int = 0
    figures: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, row: str, side: str, value: float) -> None:
        self.figures.setdefault(row, {}).setdefault(side, []).append(value)

    def sample(self, row: str, side: str, values: Iterable[float]) -> None:
        """Keep the raw samples behind a figure (for the plot)."""
        self.samples.setdefault(row, {}).setdefault(side, []).extend(values)

    def run_ids(self, labels: Iterable[str]) -> list[str]:
        return [self.ids[label] for label in labels]

    def say(self, line: str) -> None:
        if self.config.report is not None:
            self.config.report(line)


async def run_compare(config: CompareConfig) -> CompareResult:
    """Run the comparison; every figure per repetition, ready to print."""
    config.log_dir.mkdir(parents=True, exist_ok=True)
    # A client that gives up on a long poll (a stop, a timeout on a busy host) makes the
    # fakes log a traceback; a send that matters and fails shows as a missing announce.
    quiet = logging.getLogger("aiohttp.server")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    load_start = os.getloadavg()
    model = CompareModel()
    with ExitStack() as resources:
        resources.callback(quiet.setLevel, level)
        url = resources.enter_context(RedisServer(data_dir=config.log_dir / "redis")).url
        async with FakeOpenAI(model, models=["fake-model"]) as fake, FakeTelegram() as tg:
            for topic in TOPICS:
                tg.add_topic(FORUM, topic)
            bench = await _with_processes(config, url, fake, model, tg)
    return CompareResult(
        figures=bench.figures,
        samples=bench.samples,
        timeline=bench.timeline,
        machine=_machine(load_start),
        parameters=_parameters(config),
    )


async def _with_processes(
    config: CompareConfig, url: str, fake: FakeOpenAI, model: CompareModel, tg: FakeTelegram
) -> _Env:
    values = telegram_bench_values(
        redis_url=url,
        model_url=fake.base_url,
        tg=tg,
        log_dir=config.log_dir,
        log_level="WARNING",
        subagents={"max_concurrent": config.workers},
    )
    env = hermetic_env(values)
    deps = Deps.build(Settings(**values))
    log_dir = config.log_dir
    bench = _Env(
        config=config,
        deps=deps,
        pool=WorkerPool(env=env, count=config.workers, log_path=log_dir / "workers.log"),
        bare=bare.BarePool(url=url, count=config.workers, log_path=log_dir / "bare.log", env=env),
        gateway=GatewayProcess(env=env, log_path=log_dir / "gateway.log"),
        tg=tg,
        fake=fake,
        model=model,
        queue=Queue(bare.QUEUE, connection=deps.redis, serializer=JSONSerializer),
    )
    try:
        bench.pool.start()
        bench.bare.start()
        bench.gateway.start()
        await asyncio.to_thread(_all_phases, bench)
    finally:
        await asyncio.to_thread(bench.gateway.stop)
        await asyncio.to_thread(bench.pool.stop)
        await asyncio.to_thread(bench.bare.stop)
        deps.close()
    return bench


def _all_phases(bench: _Env) -> None:
    _until(bench, lambda: _ready(bench), timeout=120, what="gateway and workers to start")
    _single_spawns(bench, samples=1, record=False)  # first-run costs are not the steady state
    _bare_starts(bench, 1, record=None, samples=1)
    from bot.bench import compare_phases as phases

    only = bench.config.only
    for rep in range(bench.config.repeat):
        bench.say(f"compare: repetition {rep + 1}/{bench.config.repeat}")
        if "spawn" in only:
            _single_spawns(bench, samples=bench.config.samples, record=True)
            _bare_starts(bench, 1, record="spawn1", samples=bench.config.samples)
            _burst_spawns(bench)
            _bare_starts(bench, bench.config.burst, record="spawnN", samples=1)
        if "announce" in only:
            phases.announce(bench)
            phases.stream_latency(bench)
        if "memory" in only:
            phases.memory(bench)
        if "makespan" in only:
            phases.makespan(bench)
            phases.bare_makespan(bench)
        if "throughput" in only:
            phases.throughput(bench)
            phases.bare_throughput(bench)
        if bench.config.kill and "kill" in only:
            phases.kill(bench)


# --- the machinery the phases share -------------------------------------------------------


def _until(bench: _Env, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        _require_alive(bench)
        if time.monotonic() > deadline:
            raise CompareError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL)


def _require_alive(bench: _Env) -> None:
    problem = stack_problem(stopping=bench.config.stopping, gateway=bench.gateway, pool=bench.pool)
    if problem is not None:
        raise CompareError(problem)


def _ready(bench: _Env) -> bool:
    conn = bench.deps.redis
    fanbot = Worker.count(queue=Queue(SUBAGENTS_QUEUE, connection=conn))
    baseline = Worker.count(queue=bench.queue)
    polling = bool(bench.tg.calls_to("getUpdates"))
    return fanbot >= bench.config.workers and baseline >= bench.config.workers and polling


def spawn_runs(bench: _Env, count: int, *, topic: int | None = None) -> dict[str, float]:
    """Spawn ``count`` runs through ``sessions_spawn``'s path; ``label -> monotonic spawn``."""
    spawned = {}
    for n in range(count):
        bench.labels += 1
        label = f"cmp-{bench.labels:05d}"
        chosen = topic if topic is not None else TOPICS[n % len(TOPICS)]
        thread = ThreadRef(
            platform="telegram",
            account=str(bench.tg.bot_id),
            chat=str(FORUM["id"]),
            thread=str(chosen),
        )
        ctx = ToolContext(
            deps=bench.deps,
            session_key=requester_session_key(agent_id="main", thread=thread),
            thread=thread,
            requester=qualified_user("telegram", "1001"),
            agent_id="main",
        )
        at = time.monotonic()
        args = SpawnArgs(task=f"cmp task {label}: answer in one line", label=label)
        bench.ids[label] = str(spawn(ctx, args)["runId"])
        spawned[label] = at
    return spawned


def announced(bench: _Env, labels: Iterable[str]) -> dict[str, tuple[float, str]]:
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


def wait_announced(bench: _Env, labels: Iterable[str], *, timeout: float) -> dict[str, Any]:
    wanted = list(labels)
    _until(
        bench,
        lambda: len(announced(bench, wanted)) == len(wanted),
        timeout=timeout,
        what=f"{len(wanted)} announces",
    )
    return announced(bench, wanted)


def _single_spawns(bench: _Env, *, samples: int, record: bool) -> None:
    """One spawn at a time, each waited for; the p50 of spawn -> first model request."""
    bench.model.delay = 0.0
    delays, labels = [], {}
    for _ in range(samples):
        spawned = spawn_runs(bench, 1)
        wait_announced(bench, spawned, timeout=60)
        delays += [bench.model.arrived[label] - at for label, at in spawned.items()]
        labels.update(spawned)
    if record:
        bench.add("spawn1", "fanbot", p50(delays))
        bench.sample("spawn1", "fanbot", delays)
        bench.sample("to_start", "fanbot", _to_start(bench, labels))


def _to_start(bench: _Env, spawned: dict[str, float]) -> list[float]:
    """Spawn -> the run's ``started_at`` (its horse marked it running), per run."""
    wall = time.time() - time.monotonic()
    records = {r.label: r for r in bench.deps.runs.get_many(bench.run_ids(spawned))}
    return [(records[label].started_at or 0.0) - wall - at for label, at in spawned.items()]


def _burst_spawns(bench: _Env) -> None:
    bench.model.delay = 0.0
    spawned = spawn_runs(bench, bench.config.burst)
    wait_announced(bench, spawned, timeout=120)
    delays = [bench.model.arrived[label] - at for label, at in spawned.items()]
    bench.add("spawnN", "fanbot", p50(delays))
    bench.sample("spawnN", "fanbot", delays)


def _bare_starts(bench: _Env, count: int, *, record: str | None, samples: int) -> None:
    """``samples`` times: enqueue ``count`` no-op jobs at once; p50 of enqueue -> start."""
    delays = []
    for _ in range(samples):
        enqueued = []
        for _ in range(count):
            at = time.time()
            enqueued.append((bench.queue.enqueue(bare.noop, result_ttl=600), at))
        wait_jobs(bench, [job for job, _ in enqueued], timeout=60)
        delays += [float(job.return_value()) - at for job, at in enqueued]  # type: ignore[arg-type]
    if record is not None:
        bench.add(record, "bare", p50(delays))
        bench.sample(record, "bare", delays)


def wait_jobs(bench: _Env, jobs: list[Job], *, timeout: float) -> None:
    """Poll the jobs' statuses (one pipelined round trip per poll) until all ended."""

    def done() -> bool:
        with bench.deps.redis.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.hget(job.key, "status")
            statuses = pipe.execute()
        return all(s in (b"finished", b"failed") for s in statuses)

    _until(bench, done, timeout=timeout, what=f"{len(jobs)} bare jobs")


def last_ended(bench: _Env, jobs: list[Job]) -> float:
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


def sigkill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def ideal_makespan(config: CompareConfig) -> float:
    return math.ceil(config.makespan_runs / config.workers) * config.model_seconds


def _machine(load_start: tuple[float, float, float]) -> dict[str, str]:
    load_end = os.getloadavg()
    return {
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}",
        "load average (1 min)": f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end",
    }


def _parameters(config: CompareConfig) -> dict[str, str]:
    return {
        "workers (forked, each side) / cap": f"{config.workers} / {config.workers}",
        "repetitions": str(config.repeat),
        "burst": f"{config.burst} spawns at once; {config.burst} runs finishing in one thread",
        "makespan": f"{config.makespan_runs} runs x {config.model_seconds:g} s model latency",
        "throughput": f"{config.throughput_runs} runs, instant model",
    }
