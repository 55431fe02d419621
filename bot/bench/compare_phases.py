"""The phases of ``fanbot bench compare`` after the start-up ones, each fanbot then bare RQ:
announce, memory, makespan, throughput (stop, Redis commands, kill and the PSS slope have
modules of their own).

Each phase waits for its own runs or jobs to end before the next starts, and adds one
figure per row and side (the pool measured, or ``bare``) to the benchmark (see
:mod:`bot.bench.compare`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from bot.bench import bare
from bot.bench.compare_env import (
    BenchEnv,
    CompareError,
    children,
    ideal_makespan,
    last_ended,
    p50,
    p99,
    pss,
    spawn_runs,
    wait_announced,
    wait_arrived,
    wait_jobs,
)

ANNOUNCE_MODEL_SECONDS = 0.5  # long enough for a burst to be running before any finishes
STREAM = "bench:stream"
MEMORY_MODEL_SECONDS = 4.0  # the bare jobs whose memory is sampled outlast the sampling


def announce(bench: BenchEnv) -> None:
    """``burst`` runs in one thread, finishing together: model returns -> Telegram."""
    bench.model.delay = ANNOUNCE_MODEL_SECONDS
    spawned = spawn_runs(bench, bench.config.burst, topic=201)
    found = wait_announced(bench, spawned, timeout=120)
    bench.model.delay = 0.0
    finished = {}
    for request in list(bench.fake.requests):
        label = bench.model.label_of(request.chat)
        if label in spawned and request.finished_at is not None:
            finished[label] = request.finished_at
    delays = [found[label][0] - finished[label] for label in spawned]
    wall = time.time() - time.monotonic()  # this process's monotonic clock in wall time
    records = {r.label: r for r in bench.deps.runs.get_many(bench.run_ids(spawned))}
    bench.sample("to_finalize", bench.side, [
        (records[label].ended_at or 0.0) - wall - finished[label] for label in spawned
    ])  # fmt: skip
    bench.add("announce50", bench.side, p50(delays))
    bench.sample("announce", bench.side, delays)
    bench.add("announce99", bench.side, p99(delays))


def stream_latency(bench: BenchEnv) -> None:
    """The floor of any delivery: ``burst`` XADDs at once -> a blocked XREADGROUP."""
    conn = bench.deps.redis
    reader = redis.Redis.from_url(bench.deps.settings.redis_url)
    conn.delete(STREAM)
    conn.xgroup_create(STREAM, "g", id="$", mkstream=True)
    delays: list[float] = []
    import threading

    def read() -> None:
        while len(delays) < bench.config.burst:
            got: Any = reader.xreadgroup("g", "c", {STREAM: ">"}, count=100, block=2000)
            now = time.monotonic()
            for _stream, entries in got or []:
                for _id, fields in entries:
                    delays.append(now - float(fields[b"t"]))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    time.sleep(0.2)  # the reader is blocked in XREADGROUP
    for _ in range(bench.config.burst):
        conn.xadd(STREAM, {"t": repr(time.monotonic())})
    thread.join(timeout=10)
    reader.close()
    conn.delete(STREAM)
    if len(delays) < bench.config.burst:
        raise CompareError("XREADGROUP did not see every entry")
    bench.add("announce50", "bare", p50(delays))
    bench.sample("announce", "bare", delays)
    bench.add("announce99", "bare", p99(delays))


def makespan(bench: BenchEnv) -> None:
    """``makespan_runs`` runs of ``model_seconds`` at cap ``workers``: first spawn -> last end."""
    config = bench.config
    bench.model.delay = config.model_seconds
    t0 = time.time()
    spawned = spawn_runs(bench, config.makespan_runs)
    wait_announced(bench, spawned, timeout=ideal_makespan(config) * 3 + 60)
    bench.model.delay = 0.0
    records = bench.deps.runs.get_many(bench.run_ids(spawned))
    last = max(r.ended_at or 0.0 for r in records)
    bench.add("makespan", bench.side, (last - t0) / ideal_makespan(config))
    bench.timeline[bench.side] = [
        ((r.started_at or t0) - t0, (r.ended_at or t0) - t0) for r in records
    ]


def bare_makespan(bench: BenchEnv) -> None:
    config = bench.config
    t0 = time.time()
    jobs = [
        bench.queue.enqueue(bare.nap, config.model_seconds, result_ttl=600)
        for _ in range(config.makespan_runs)
    ]
    wait_jobs(bench, jobs, timeout=ideal_makespan(config) * 3 + 60)
    spans = [job.return_value() for job in jobs]
    last = max(float(span[1]) for span in spans)  # type: ignore[index]
    bench.add("makespan", "bare", (last - t0) / ideal_makespan(config))
    bench.timeline["bare"] = [(span[0] - t0, span[1] - t0) for span in spans]  # type: ignore[index]


def memory(bench: BenchEnv) -> None:
    """PSS of an idle worker process, and added per running run: ``workers`` (the cap) runs
    whose model calls are held open, sampled while all of them wait.

    fanbot's launcher is summed with its workers (its PSS spread over them): the workers
    are forked from it and share its pages, so leaving it out would drop its share of
    them from the idle figure and, as each horse takes a share too, add to the per-run one.
    In the threads pool the runs are threads of the worker processes (no horses).
    """
    busy = bench.config.workers
    workers = bench.pool.worker_pids()
    launcher = [bench.pool.launcher.pid] if bench.pool.launcher is not None else []
    idle = pss(launcher + workers)
    bench.add("pss_idle", bench.side, idle / len(workers))
    spawned = spawn_runs(bench, busy, hold=True)
    try:
        wait_arrived(bench, spawned)
        horses = busy if bench.side == "fork" else 0
        _sample_running(bench, bench.side, workers, idle, busy, horses, lambda: True, also=launcher)
    finally:
        bench.model.release(bench.loop, spawned)
    wait_announced(bench, spawned, timeout=60)
    workers = bench.bare.worker_pids()
    idle = pss(workers)
    bench.add("pss_idle", "bare", idle / len(workers))
    jobs = [bench.queue.enqueue(bare.nap, MEMORY_MODEL_SECONDS) for _ in range(busy)]
    _sample_running(bench, "bare", workers, idle, busy, busy, lambda: True)
    wait_jobs(bench, jobs, timeout=MEMORY_MODEL_SECONDS + 60)


def _sample_running(
    bench: BenchEnv,
    side: str,
    workers: list[int],
    idle: int,
    busy: int,
    horses: int,
    ready: Callable[[], bool],
    also: list[int] | None = None,
) -> None:
    """PSS of workers + their ``horses`` (+ ``also``) once that many are running, minus
    ``idle``, per each of the ``busy`` runs."""
    deadline = time.monotonic() + 60
    while len(children(workers)) < horses or not ready():
        if time.monotonic() > deadline:
            raise CompareError(f"{side}: {horses} horses never ran at once")
        time.sleep(0.02)
    time.sleep(0.2)  # past the horse's start-up (imports, first request)
    running = children(workers)
    total = pss((also or []) + workers + running)
    if sorted(children(workers)) != sorted(running):
        raise CompareError(f"{side}: a run ended while its memory was sampled")
    bench.add("pss_run", side, (total - idle) / busy)


def throughput(bench: BenchEnv) -> None:
    """Runs per minute with an instant model: first spawn -> last run ended."""
    bench.model.delay = 0.0
    t0 = time.time()
    spawned = spawn_runs(bench, bench.config.throughput_runs)
    wait_announced(bench, spawned, timeout=bench.config.throughput_runs + 120)
    last = max(r.ended_at or 0.0 for r in bench.deps.runs.get_many(bench.run_ids(spawned)))
    bench.add("throughput", bench.side, bench.config.throughput_runs / (last - t0) * 60)


def bare_throughput(bench: BenchEnv) -> None:
    t0 = time.time()
    jobs = [
        bench.queue.enqueue(bare.noop, result_ttl=600) for _ in range(bench.config.throughput_runs)
    ]
    wait_jobs(bench, jobs, timeout=bench.config.throughput_runs + 120)
    last = last_ended(bench, jobs)
    bench.add("throughput", "bare", bench.config.throughput_runs / (last - t0) * 60)
