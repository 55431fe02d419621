"""Soak benchmark: many subagent runs through real processes, then count every announce.

Processes: a private Redis, ``fanbot gateway`` as a child process with the Telegram channel
pointed at :class:`~bot.testing.fake_telegram.FakeTelegram`, and ``fanbot worker`` processes
in the fork or the threads pool (``pool``); the fake model (:class:`~bot.testing.fake_openai.FakeOpenAI`) and the fake Bot
API run in this process. Runs are created by the real spawn path
(:func:`bot.agent.spawn_tool.spawn`) into forum topics, so their announces travel worker ->
outbox -> gateway -> Telegram like any other. The model answers after a random delay, or
fails (HTTP 500 every time, HTTP 429 once), or hangs past the run timeout (see
:mod:`bot.bench.soak_plan`); a few Telegram sends fail with 429/502 too.

Figures (:class:`~bot.bench.soak_report.SoakResult`): runs per minute, lost runs (not
terminal, or no announce in Telegram), duplicated announces, status histogram, Redis memory
before / at peak / after the runs / after the archive window, gateway and worker RSS at
start and end, stream lengths, dead letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rq import Worker
from rq.registry import FailedJobRegistry

from bot.bench import probes
from bot.bench.bench_stack import (
    pool_args,
    spawn_in_topic,
    stack_problem,
    telegram_bench_values,
    threads_concurrency,
)
from bot.bench.soak_plan import HANG_RUN_TIMEOUT, Kind, PlannedRun, SoakModel, make_plan
from bot.bench.soak_report import MIB, Rss, SoakResult, announces, compare
from bot.config import Settings
from bot.deps import Deps
from bot.errors import FanbotError
from bot.redis.server import RedisServer
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env
from bot.types import RunRecord

FORUM = forum(-1001000000777, "soak")
FIRST_TOPIC = 100
POLL = 0.5


class BenchError(FanbotError):
    """The benchmark could not run (a process did not start, or died)."""


@dataclass(frozen=True, kw_only=True)
class SoakConfig:
    """Knobs of one soak (the CLI's options)."""

    runs: int = 1000
    workers: int = 4  # worker processes
    max_concurrent: int | None = None  # default: ``workers``
    pool: str = "fork"  # fanbot worker --pool
    concurrency: int | None = None  # threads pool: runs per process (default: share + dequeuers)
    seed: int = 1
    topics: int = 20
    max_delay: float = 0.3
    fail_rate: float = 0.05
    hang_rate: float = 0.01
    tool_rate: float = 0.2
    telegram_faults: int = 10
    archive_after_minutes: float = 0.5
    timeout: float | None = None  # for all runs to end; default 120 s + 1 s per run
    rss_bound_mb: float = 16.0
    redis_url: str | None = None  # default: a private redis-server in ``log_dir``
    log_dir: Path  # process logs (and the private Redis) go here
    report: Callable[[str], None] | None = None  # gets a progress line every ~10 s
    stopping: threading.Event | None = None  # set (SIGTERM, Ctrl-C): stop at the next wait

    @property
    def cap(self) -> int:
        return self.max_concurrent or self.workers

    @property
    def threads_concurrency(self) -> int:
        return self.concurrency or threads_concurrency(self.cap, self.workers)


@dataclass(kw_only=True)
class _Env:
    config: SoakConfig
    deps: Deps
    pool: WorkerPool
    gateway: GatewayProcess
    tg: FakeTelegram
    plan: list[PlannedRun]
    memory: dict[str, int] = field(default_factory=dict)
    rss: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> kind -> bytes
    processes: dict[str, int] = field(default_factory=dict)

    def worker_pids(self) -> list[int]:
        launcher = [self.pool.launcher.pid] if self.pool.launcher is not None else []
        return launcher + self.pool.worker_pids()

    def sample_rss(self, phase: str) -> None:
        gateway = probes.rss_bytes([self.gateway.pid])
        workers = probes.rss_bytes(self.worker_pids())
        self.rss[phase] = {"gateway": sum(gateway.values()), "workers": sum(workers.values())}
        self.processes = {"gateway": len(gateway), "workers": len(workers)}


async def run_soak(config: SoakConfig) -> SoakResult:
    """Run one soak and return its figures (it does not raise on lost runs: it counts them)."""
    config.log_dir.mkdir(parents=True, exist_ok=True)
    topics = list(range(FIRST_TOPIC, FIRST_TOPIC + config.topics))
    plan = make_plan(
        runs=config.runs, seed=config.seed, topics=topics, max_delay=config.max_delay,
        fail_rate=config.fail_rate, hang_rate=config.hang_rate, tool_rate=config.tool_rate,
    )  # fmt: skip
    model = SoakModel(plan)
    with ExitStack() as resources:
        url = config.redis_url
        if url is None:
            url = resources.enter_context(RedisServer(data_dir=config.log_dir / "redis")).url
        async with FakeOpenAI(model, models=["fake-model"]) as fake, FakeTelegram() as tg:
            for topic in topics:
                tg.add_topic(FORUM, topic)
            _inject_telegram_faults(tg, config)
            result = await _with_processes(config, url, plan, fake.base_url, tg)
            result.model_requests = len(fake.requests)
            result.model_unknown = model.unknown
            result.model_max_in_flight = fake.max_concurrent
            result.telegram = _telegram_figures(tg, config)
    result.logs = {
        "gateway": probes.log_problems(config.log_dir / "gateway.log"),
        "workers": probes.log_problems(config.log_dir / "workers.log"),
    }
    result.log_dir = str(config.log_dir)
    return result


async def _with_processes(
    config: SoakConfig, url: str, plan: list[PlannedRun], model_url: str, tg: FakeTelegram
) -> SoakResult:
    values = telegram_bench_values(
        redis_url=url,
        model_url=model_url,
        tg=tg,
        log_dir=config.log_dir,
        log_level="INFO",
        subagents={
            "max_concurrent": config.cap,
            "archive_after_minutes": config.archive_after_minutes,
        },
    )
    env = hermetic_env(values)
    deps = Deps.build(Settings(**values))
    soak = _Env(
        config=config,
        deps=deps,
        pool=WorkerPool(
            env=env,
            count=config.workers,
            log_path=config.log_dir / "workers.log",
            args=pool_args(config.pool, concurrency=config.threads_concurrency),
        ),
        gateway=GatewayProcess(env=env, log_path=config.log_dir / "gateway.log"),
        tg=tg,
        plan=plan,
    )
    try:
        result = await _soak(soak)
    finally:
        exit_code = await asyncio.to_thread(soak.gateway.stop)
        await asyncio.to_thread(soak.pool.stop)
        deps.close()
    result.gateway_exit = exit_code
    return result


def _inject_telegram_faults(tg: FakeTelegram, config: SoakConfig) -> None:
    """Spread 429s (retry after 1 s) and 502s over roughly the first half of all sends."""
    rng = random.Random(config.seed + 1)
    gap = max(1, 2 * config.runs // max(1, config.telegram_faults))
    for n in range(config.telegram_faults):
        after = rng.randint(0, gap)
        if n % 2:
            tg.inject("sendMessage", status=502, description="Bad Gateway", after=after)
        else:
            tg.inject("sendMessage", status=429, retry_after=1, after=after)


async def _soak(soak: _Env) -> SoakResult:
    config, deps = soak.config, soak.deps
    load_start = os.getloadavg()
    soak.pool.start()
    soak.gateway.start()
    await _until(soak, lambda: _ready(soak), timeout=120, what="gateway and workers to start")
    soak.memory["before"] = await asyncio.to_thread(probes.used_memory, deps.redis)
    await asyncio.to_thread(soak.sample_rss, "start")
    t0 = time.time()
    ids = await asyncio.to_thread(_spawn_all, deps, soak.plan, soak.tg.bot_id, soak.config.stopping)
    spawned = time.time()
    timed_out, announced_at = await _wait_for_runs(soak, ids)
    soak.memory["after runs"] = await asyncio.to_thread(probes.used_memory, deps.redis)
    archive_deadline = config.archive_after_minutes * 60 + 30
    with contextlib.suppress(BenchError):  # counted below as "still due"
        await _until(soak, lambda: _archive_done(deps), timeout=archive_deadline, what="archive")
    soak.memory["after archive"] = await asyncio.to_thread(probes.used_memory, deps.redis)
    await asyncio.to_thread(soak.sample_rss, "end")
    records = await asyncio.to_thread(_records, deps, ids)
    return await asyncio.to_thread(
        _result, soak, records, t0=t0, spawned=spawned, announced_at=announced_at,
        timed_out=timed_out, load_start=load_start,
    )  # fmt: skip


async def _until(soak: _Env, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        _require_alive(soak)
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(POLL)


def _interrupted(stopping: threading.Event | None) -> None:
    if stopping is not None and stopping.is_set():
        raise BenchError("interrupted; its processes are stopped")


def _require_alive(soak: _Env) -> None:
    problem = stack_problem(stopping=soak.config.stopping, gateway=soak.gateway, pool=soak.pool)
    if problem is not None:
        raise BenchError(problem)


def _ready(soak: _Env) -> bool:
    workers = Worker.count(connection=soak.deps.redis)
    polling = bool(soak.tg.calls_to("getUpdates"))
    return workers >= soak.config.workers and polling


def _spawn_all(
    deps: Deps, plan: list[PlannedRun], bot_id: int, stopping: threading.Event | None = None
) -> dict[str, str]:
    """Create every run through ``sessions_spawn``'s code path; ``label -> run id``."""
    ids = {}
    for run in plan:
        _interrupted(stopping)
        ids[run.label] = spawn_in_topic(
            deps, bot_id=bot_id, chat=FORUM["id"], topic=run.topic, task=run.task,
            label=run.label, run_timeout=HANG_RUN_TIMEOUT if run.kind is Kind.HANG else None,
        )  # fmt: skip
    return ids


async def _wait_for_runs(soak: _Env, ids: dict[str, str]) -> tuple[bool, float]:
    """Poll until every run ended and the outbox is drained; (gave up?, all-announced time)."""
    config, deps = soak.config, soak.deps
    deadline = time.monotonic() + (config.timeout or 120 + config.runs)
    announced_at: float | None = None
    warm = max(1, config.runs // 10)
    peak = 0
    last_report = time.monotonic()
    while True:
        active, memory, drained = await asyncio.to_thread(_progress, deps)
        peak = max(peak, memory)
        done = config.runs - active
        if "warm" not in soak.rss and done >= warm:
            await asyncio.to_thread(soak.sample_rss, "warm")
        labels = {a.label for a in announces(soak.tg.messages)}
        if announced_at is None and len(labels & ids.keys()) == len(ids):
            announced_at = time.time()
        if config.report and time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            config.report(f"soak: {done}/{config.runs} runs ended, {len(labels)} announced")
        if active == 0 and drained:
            break
        _require_alive(soak)
        if time.monotonic() > deadline:
            soak.memory["peak (sampled)"] = peak
            return True, announced_at or time.time()
        await asyncio.sleep(POLL)
    soak.memory["peak (sampled)"] = peak
    return False, announced_at or time.time()


def _progress(deps: Deps) -> tuple[int, int, bool]:
    active = int(deps.redis.scard(deps.keys.active_runs))
    return active, probes.used_memory(deps.redis), probes.outbox_drained(deps.redis, deps.keys)


def _archive_done(deps: Deps) -> bool:
    return int(deps.redis.zcard(deps.keys.archive_due)) == 0


def _records(deps: Deps, ids: dict[str, str]) -> dict[str, RunRecord]:
    found = {r.run_id: r for r in deps.runs.get_many(ids.values())}
    return {label: found[run_id] for label, run_id in ids.items() if run_id in found}


def _result(
    soak: _Env,
    records: dict[str, RunRecord],
    *,
    t0: float,
    spawned: float,
    announced_at: float,
    timed_out: bool,
    load_start: tuple[float, float, float],
) -> SoakResult:
    deps, config = soak.deps, soak.config
    ended = [r.ended_at for r in records.values() if r.ended_at is not None]
    unexpected = {
        run.label: (run.expected.value, records[run.label].status.value)
        for run in soak.plan
        if run.label in records and records[run.label].status is not run.expected
    }
    return SoakResult(
        parameters=_parameters(config, load_start),
        plan=Counter(run.kind.value for run in soak.plan),
        statuses=Counter(r.status.value for r in records.values()),
        unexpected=unexpected,
        delivery=compare(soak.plan, records, announces(soak.tg.messages)),
        spawn_seconds=spawned - t0,
        terminal_seconds=(max(ended) if ended else time.time()) - t0,
        announced_seconds=announced_at - t0,
        timed_out=timed_out,
        memory=soak.memory,
        streams=probes.streams(deps.redis, deps.keys),
        archive_left=int(deps.redis.zcard(deps.keys.archive_due)),
        archived=sum(r.archived_at is not None for r in records.values()),
        gateway_rss=_rss(soak, "gateway"),
        worker_rss=_rss(soak, "workers"),
        rss_bound=int(config.rss_bound_mb * MIB),
        model_requests=0,
        model_unknown=0,
        model_max_in_flight=0,
        telegram={},
        rq_failed=FailedJobRegistry(SUBAGENTS_QUEUE, connection=deps.redis).count,
        logs={},
        census=probes.key_census(deps.redis),
    )


def _rss(soak: _Env, kind: str) -> Rss:
    start = soak.rss["start"][kind]
    return Rss(
        start=start,
        warm=soak.rss.get("warm", soak.rss["start"])[kind],
        end=soak.rss["end"][kind],
        processes=soak.processes[kind],
    )


def _parameters(config: SoakConfig, load_start: tuple[float, float, float]) -> dict[str, str]:
    load_end = os.getloadavg()
    pool = config.pool
    if pool == "threads":
        pool += f", {config.threads_concurrency} runs at once per process"
    return {
        "runs / workers / max_concurrent": f"{config.runs} / {config.workers} / {config.cap}",
        "worker pool": pool,
        "seed": str(config.seed),
        "forum topics": str(config.topics),
        "model delay": f"0-{config.max_delay * 1000:.0f} ms uniform",
        "failure rates": (
            f"500+429 {config.fail_rate:.0%} (half each), hang {config.hang_rate:.0%} "
            f"(run timeout {HANG_RUN_TIMEOUT}s), tool call {config.tool_rate:.0%}"
        ),
        "telegram send faults": f"{config.telegram_faults} (429 retry_after=1 and 502)",
        "archive_after_minutes": f"{config.archive_after_minutes:g}",
        "machine": (
            f"{os.cpu_count()} CPUs; load avg {load_start[0]:.2f} at start, "
            f"{load_end[0]:.2f} at end (1-min)"
        ),
    }


def _telegram_figures(tg: FakeTelegram, config: SoakConfig) -> dict[str, int]:
    edits = sum(len(m.edits) for m in tg.messages)
    return {
        "sendMessage calls": len(tg.calls_to("sendMessage")),
        "messages": len(tg.messages),
        "edits": edits,
        "status messages left ⏳": sum(m.text.startswith("⏳") for m in tg.messages),
        "faults injected": config.telegram_faults,
    }
