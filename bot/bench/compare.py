"""``fanbot bench compare``: fanbot against bare RQ on one private Redis, in one run.

Processes: a private Redis; ``fanbot gateway`` with the Telegram channel pointed at
:class:`~bot.testing.fake_telegram.FakeTelegram`; ``--workers`` plain RQ workers
(:mod:`bot.bench.bare`) on their own queue; and fanbot's workers, in each pool of
``--pool`` one after the other (``subagents.max_concurrent`` = ``--workers`` in both):
the fork pool runs ``--workers`` worker processes, the threads pool ``--processes`` of
``--concurrency`` runs each. The fake model and the fake Bot API run in this process, so
their clocks are this process's. Runs are created by the real spawn path
(:func:`bot.agent.spawn_tool.spawn`); the phases run one after the other, never side by side, so
fanbot and the baseline never compete for the cores. Each repetition measures every row of
:data:`bot.bench.compare_report.ROWS` (bare RQ again in each pool's pass); the table shows
min / median / p99 over repetitions, and whether each goal was met.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import time
from collections import Counter
from contextlib import ExitStack

from rq import Queue
from rq.serializers import JSONSerializer

from bot.bench import bare, compare_commands, compare_kill, compare_slope, compare_stop
from bot.bench import compare_phases as phases
from bot.bench.bench_stack import pool_args, telegram_bench_values
from bot.bench.compare_env import (
    FORUM,
    TOPICS,
    BenchEnv,
    CompareConfig,
    CompareModel,
    _ready,
    _until,
    p50,
    spawn_runs,
    wait_announced,
    wait_jobs,
)
from bot.bench.compare_report import CompareResult
from bot.config import Settings
from bot.deps import Deps
from bot.redis.server import RedisServer
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env


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
        details=bench.details,
        names=_names(config),
        machine=_machine(load_start),
        parameters=_parameters(config),
    )


async def _with_processes(
    config: CompareConfig, url: str, fake: FakeOpenAI, model: CompareModel, tg: FakeTelegram
) -> BenchEnv:
    values = telegram_bench_values(
        redis_url=url,
        model_url=fake.base_url,
        tg=tg,
        log_dir=config.log_dir,
        log_level="WARNING",
        # The kill phase times how soon a dead worker's runs are noticed: they end unknown
        # there (the same noticers and script as a resume: bot.runs.recover), not resume.
        subagents={"max_concurrent": config.workers, "max_resumes": 0},
    )
    env = hermetic_env(values)
    deps = Deps.build(Settings(**values))
    log_dir = config.log_dir
    bench = BenchEnv(
        config=config,
        deps=deps,
        values=values,
        env=env,
        loop=asyncio.get_running_loop(),
        side=config.pools[0],
        pool=_fanbot_pool(config, env, config.pools[0]),
        bare=bare.BarePool(url=url, count=config.workers, log_path=log_dir / "bare.log", env=env),
        gateway=GatewayProcess(env=env, log_path=log_dir / "gateway.log"),
        tg=tg,
        fake=fake,
        model=model,
        queue=Queue(bare.QUEUE, connection=deps.redis, serializer=JSONSerializer),
    )
    try:
        bench.bare.start()
        bench.gateway.start()
        for side in config.pools:
            await asyncio.to_thread(_pass, bench, side)
    finally:
        model.release(bench.loop, list(model.hold))
        await asyncio.to_thread(bench.gateway.stop)
        await asyncio.to_thread(bench.pool.stop)
        await asyncio.to_thread(bench.bare.stop)
        deps.close()
    return bench


def _fanbot_pool(config: CompareConfig, env: dict[str, str], side: str) -> WorkerPool:
    count = config.processes if side == "threads" else config.workers
    return WorkerPool(
        env=env,
        count=count,
        log_path=config.log_dir / f"workers-{side}.log",
        args=pool_args(side, concurrency=config.threads_concurrency),
    )


def _pass(bench: BenchEnv, side: str) -> None:
    """Every phase with fanbot's workers in ``side``'s pool (started here, stopped after)."""
    bench.pool.stop()
    bench.side, bench.pool = side, _fanbot_pool(bench.config, bench.env, side)
    bench.pool.start()
    first = bench.labels
    try:
        _all_phases(bench)
        if "slope" in bench.config.only and side == "threads":
            compare_slope.slope(bench)  # replaces the pool with a one-process one
    finally:
        bench.pool.stop()
    labels = [f"cmp-{n:05d}" for n in range(first + 1, bench.labels + 1)]
    statuses = Counter(r.status.value for r in bench.deps.runs.get_many(bench.run_ids(labels)))
    shown = ", ".join(f"{status} {n}" for status, n in statuses.most_common())
    bench.detail(f"runs of the {side} pool's pass, by status (stop phase: stopped, kill: "
                 "unknown, the rest: success)", shown)  # fmt: skip


def _all_phases(bench: BenchEnv) -> None:
    _until(bench, lambda: _ready(bench), timeout=120, what="gateway and workers to start")
    _single_spawns(bench, samples=1, record=False)  # first-run costs are not the steady state
    _bare_starts(bench, 1, record=None, samples=1)
    only = bench.config.only
    for rep in range(bench.config.repeat):
        bench.say(f"compare: {bench.side} pool, repetition {rep + 1}/{bench.config.repeat}")
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
        if "stop" in only:
            compare_stop.stop(bench)
            compare_stop.bare_stop(bench)
        if "commands" in only:
            compare_commands.commands(bench)
            compare_commands.bare_commands(bench)
        if bench.config.kill and "kill" in only:
            compare_kill.kill(bench)


# --- the machinery the phases share -------------------------------------------------------


def _single_spawns(bench: BenchEnv, *, samples: int, record: bool) -> None:
    """One spawn at a time, each waited for; the p50 of spawn -> first model request."""
    bench.model.delay = 0.0
    delays, labels = [], {}
    for _ in range(samples):
        spawned = spawn_runs(bench, 1)
        wait_announced(bench, spawned, timeout=60)
        delays += [bench.model.arrived[label] - at for label, at in spawned.items()]
        labels.update(spawned)
    if record:
        bench.add("spawn1", bench.side, p50(delays))
        bench.sample("spawn1", bench.side, delays)
        bench.sample("to_start", bench.side, _to_start(bench, labels))


def _to_start(bench: BenchEnv, spawned: dict[str, float]) -> list[float]:
    """Spawn -> the run's ``started_at`` (its horse marked it running), per run."""
    wall = time.time() - time.monotonic()
    records = {r.label: r for r in bench.deps.runs.get_many(bench.run_ids(spawned))}
    return [(records[label].started_at or 0.0) - wall - at for label, at in spawned.items()]


def _burst_spawns(bench: BenchEnv) -> None:
    bench.model.delay = 0.0
    spawned = spawn_runs(bench, bench.config.burst)
    wait_announced(bench, spawned, timeout=120)
    delays = [bench.model.arrived[label] - at for label, at in spawned.items()]
    bench.add("spawnN", bench.side, p50(delays))
    bench.sample("spawnN", bench.side, delays)


def _bare_starts(bench: BenchEnv, count: int, *, record: str | None, samples: int) -> None:
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


def _machine(load_start: tuple[float, float, float]) -> dict[str, str]:
    load_end = os.getloadavg()
    return {
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}",
        "load average (1 min)": f"{load_start[0]:.2f} at start, {load_end[0]:.2f} at end",
    }


def _names(config: CompareConfig) -> dict[str, str]:
    """The parameters the rows' names show (see compare_report.ROWS)."""
    return {
        "burst": str(config.burst),
        "runs": str(config.makespan_runs),
        "seconds": f"{config.model_seconds:g}",
        "cap": str(config.workers),
        "points": " / ".join(str(n) for n in sorted(set(config.slope_points))),
    }


def _parameters(config: CompareConfig) -> dict[str, str]:
    pools = {
        "threads": f"threads: {config.processes} process(es) x {config.threads_concurrency} "
        "runs at once",
        "fork": f"fork: {config.workers} forked workers",
    }
    return {
        "cap (subagents.max_concurrent) / bare RQ workers": f"{config.workers} / {config.workers}",
        "fanbot pools": "; ".join(pools[p] for p in config.pools),
        "repetitions": f"{config.repeat} per pool (bare RQ measured again in each pool's pass)",
        "burst": f"{config.burst} spawns at once; {config.burst} runs finishing in one thread",
        "makespan": f"{config.makespan_runs} runs x {config.model_seconds:g} s model latency",
        "throughput": f"{config.throughput_runs} runs, instant model",
        "Redis commands": f"{config.command_runs} runs (bare: no-op jobs); idle traffic "
        f"measured over {config.idle_seconds:g} s",
    }
