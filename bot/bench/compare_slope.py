"""``fanbot bench compare``'s PSS slope: what each running subagent adds to ONE threads-pool
worker process, from its PSS at ``slope_points`` runs at once (0 / 100 / 200).

The pass's pool is stopped and a launcher with one worker process is started in its
place, with a cap (``subagents.max_concurrent``) and a concurrency of the largest point.
The runs hold their model calls open; the PSS of the worker and its launcher (the worker
shares the launcher's pages, see compare_phases.memory) is read once each point's runs
all wait on the model. The figure is the least-squares slope, bytes per run. Once per
pass, after its repetitions; the fork pool has no such figure (a run is a process there).
"""

from __future__ import annotations

import time

from bot.bench.bench_stack import pool_args, threads_concurrency
from bot.bench.compare_env import (
    BenchEnv,
    _until,
    pss,
    registered,
    spawn_runs,
    wait_announced,
    wait_arrived,
)
from bot.config import Settings
from bot.deps import Deps
from bot.testing.stack import WorkerPool, hermetic_env

SETTLE_SECONDS = 0.5  # past the last runs' start-up (their first request is out)
MIB = 1024 * 1024


def slope(bench: BenchEnv) -> None:
    """PSS of one threads-pool process at each point; the slope per running run."""
    points = sorted(set(bench.config.slope_points) | {0})
    top = max(points)
    cap = max(top, bench.config.workers)
    values = {**bench.values, "subagents": {**bench.values["subagents"], "max_concurrent": cap}}
    deps = Deps.build(Settings(**values))
    bench.pool.stop()
    bench.pool = WorkerPool(
        env=hermetic_env(values),
        count=1,
        log_path=bench.config.log_dir / "workers-slope.log",
        args=pool_args("threads", concurrency=threads_concurrency(cap, 1)),
    )
    bench.pool.start()
    held: dict[str, float] = {}
    try:
        _until(bench, lambda: registered(bench) >= 1, timeout=120, what="the slope's worker")
        sizes = {}
        for point in points:
            more = spawn_runs(bench, point - len(held), hold=True, deps=deps)
            held.update(more)
            wait_arrived(bench, held, timeout=60 + point)
            _until(bench, lambda: bench.fake.in_flight >= len(held), timeout=60, what="runs")
            time.sleep(SETTLE_SECONDS)
            sizes[point] = pss(_pids(bench))
    finally:
        bench.model.release(bench.loop, held)
    wait_announced(bench, held, timeout=60 + top)
    deps.close()
    bench.add("pss_slope", "threads", fit(sizes))
    shown = ", ".join(f"{sizes[p] / MIB:.1f} MB at {p}" for p in points)
    bench.detail("PSS of one threads-pool process (and its launcher)", f"{shown} runs")


def fit(sizes: dict[int, int]) -> float:
    """The least-squares slope of ``sizes`` (bytes at each run count), bytes per run."""
    n = len(sizes)
    mean_x = sum(sizes) / n
    mean_y = sum(sizes.values()) / n
    spread = sum((x - mean_x) ** 2 for x in sizes)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in sizes.items()) / spread


def _pids(bench: BenchEnv) -> list[int]:
    launcher = [bench.pool.launcher.pid] if bench.pool.launcher is not None else []
    return launcher + bench.pool.worker_pids()
