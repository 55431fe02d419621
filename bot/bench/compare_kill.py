"""``fanbot bench compare``'s kill figure: a worker process SIGKILLed -> every run it held
ended (terminal in Redis), then announced ``unknown``.

Threads pool: the runs are held (model calls open) until one worker process holds several;
that process alone is killed, not its launcher, which notices and ends its runs. Fork pool:
a worker holds one run, in its work horse; the worker and its horse are killed (a horse
left alive would end its run itself).
"""

from __future__ import annotations

import socket
import time

from rq import Queue, Worker
from rq.job import Job

from bot.bench.compare_env import (
    BenchEnv,
    CompareError,
    _until,
    children,
    sigkill,
    spawn_runs,
    wait_announced,
    wait_arrived,
)
from bot.store.jobs import SUBAGENTS_QUEUE


def kill(bench: BenchEnv) -> None:
    """Kill the worker process holding runs; seconds until each of them is terminal."""
    count = min(bench.config.burst, bench.config.workers) if bench.side == "threads" else 1
    spawned = spawn_runs(bench, count, hold=True)
    try:
        wait_arrived(bench, spawned)
        victims, held = _victims(bench)
        killed = time.monotonic()
        sigkill(victims)
        _until(bench, lambda: _all_ended(bench, held), timeout=60, what="the killed runs to end")
        bench.add("kill", bench.side, time.monotonic() - killed)
    finally:
        bench.model.release(bench.loop, spawned)  # runs another process held finish
    found = wait_announced(bench, spawned, timeout=60)
    wrong = {bench.ids[label]: found[label][1] for label in spawned if bench.ids[label] in held}
    if any(status != "unknown" for status in wrong.values()):
        raise CompareError(f"killed runs were announced {wrong}, not unknown")
    bench.detail(f"kill, {bench.side}", f"{len(held)} run(s) held by the killed process")
    _until_workers(bench)


def _victims(bench: BenchEnv) -> tuple[list[int], set[str]]:
    """The pids to kill and the run ids they hold."""
    workers = bench.pool.worker_pids()
    if bench.side == "fork":
        hosts = [pid for pid in workers if children([pid])]
        if len(hosts) != 1:
            raise CompareError(f"expected one worker running a run, found {len(hosts)}")
        held = {bench.deps.jobs.current_run_id(job) for job in _jobs_of(bench, hosts[0])}
        return children(hosts) + hosts, {run for run in held if run is not None}
    holding = {pid: _jobs_of(bench, pid) for pid in workers}
    victim = max(holding, key=lambda pid: len(holding[pid]))
    held = {bench.deps.jobs.current_run_id(job) for job in holding[victim]}
    return [victim], {run for run in held if run is not None}


def _jobs_of(bench: BenchEnv, pid: int) -> list[Job]:
    return bench.deps.rq.current_jobs(pid=pid, host=socket.gethostname())


def _all_ended(bench: BenchEnv, run_ids: set[str]) -> bool:
    records = bench.deps.runs.get_many(run_ids)
    return len(records) == len(run_ids) and all(r.status.terminal for r in records)


def _until_workers(bench: BenchEnv) -> None:
    """The launcher restarted the killed worker (the next repetition needs them all)."""
    queue = Queue(SUBAGENTS_QUEUE, connection=bench.deps.redis)

    def restarted() -> bool:
        pids = bench.pool.worker_pids()
        registered = {w.pid for w in Worker.all(queue=queue)}
        return len(pids) >= bench.processes and set(pids) <= registered

    _until(bench, restarted, timeout=60, what="the killed worker to be restarted")
