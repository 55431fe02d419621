"""``fanbot bench compare``'s stop figure: ``/subagents stop`` -> the run ``stopped`` in
Redis, against RQ's own stop (``send_stop_job_command`` -> the job ``stopped``).

fanbot: the burst's runs hold their model calls open; once the gateway is quiet (their
status cards, and an earlier phase's announces and edits, are out) each is stopped in
turn by a ``/subagents stop <id>`` message in its forum topic, pushed to the Telegram fake
(the gateway's long poll gets it), from the user who spawned it. bare RQ: as many sleeping jobs,
each stopped in turn by RQ's stop command (its worker kills the horse). Each side's figure
is the p99 of its stops.
"""

from __future__ import annotations

import time

from rq.command import send_stop_job_command
from rq.job import Job
from rq.serializers import JSONSerializer

from bot.bench import bare
from bot.bench.compare_env import (
    FORUM,
    POLL,
    BenchEnv,
    CompareError,
    _until,
    p50,
    p99,
    spawn_runs,
    wait_announced,
    wait_arrived,
    wait_quiet,
)
from bot.types import RunStatus

STOP_POLL = 0.002
BARE_JOB_SECONDS = 120.0  # the bare jobs sleep past their stop


def stop(bench: BenchEnv) -> None:
    """Stop each held run of a burst with ``/subagents stop``; p99 of message -> stopped."""
    count = min(bench.config.burst, bench.config.workers)
    spawned = spawn_runs(bench, count, hold=True)
    delays = []
    try:
        wait_arrived(bench, spawned)
        wait_quiet(bench)  # their status cards are out, and an earlier phase's edits
        for label in spawned:
            delays.append(_stop_one(bench, label))
    finally:
        bench.model.release(bench.loop, spawned)
    found = wait_announced(bench, spawned, timeout=60)
    if any(status != "stopped" for _, status in found.values()):
        raise CompareError(f"stopped runs were announced {found}")
    bench.add("stop99", bench.side, p99(delays))
    bench.sample("stop", bench.side, delays)
    bench.detail(f"/subagents stop → stopped, {bench.side}", _shown(delays))


def _stop_one(bench: BenchEnv, label: str) -> float:
    run_id = bench.ids[label]
    text = f"/subagents stop {run_id[:8]}"
    topic = bench.topics[label]

    def push() -> None:
        bench.tg.push(bench.tg.message(chat=FORUM, text=text, thread_id=topic))

    sent = time.monotonic()
    bench.loop.call_soon_threadsafe(push)
    deadline = sent + 30
    while True:
        record = bench.deps.runs.get(run_id)
        if record is not None and record.status is RunStatus.STOPPED:
            return time.monotonic() - sent
        if time.monotonic() > deadline:
            raise CompareError(f"{text}: the run is {record.status if record else None} after 30s")
        time.sleep(STOP_POLL)


def bare_stop(bench: BenchEnv) -> None:
    """RQ's stop command for each of as many sleeping jobs; p99 of command -> ``stopped``."""
    count = min(bench.config.burst, bench.config.workers)
    jobs = [bench.queue.enqueue(bare.nap, BARE_JOB_SECONDS, result_ttl=600) for _ in range(count)]
    _until(bench, lambda: _all_started(bench, jobs), timeout=60, what="bare jobs to start")
    delays = []
    for job in jobs:
        sent = time.monotonic()
        send_stop_job_command(bench.deps.redis, job.id, serializer=JSONSerializer)
        while bench.deps.redis.hget(job.key, "status") != b"stopped":
            if time.monotonic() > sent + 30:
                raise CompareError(f"bare job {job.id} not stopped after 30s")
            time.sleep(STOP_POLL)
        delays.append(time.monotonic() - sent)
    bench.add("stop99", "bare", p99(delays))
    bench.sample("stop", "bare", delays)
    bench.detail("stop-job command → job stopped, bare RQ", _shown(delays))
    time.sleep(POLL * 10)  # the workers are back at their queue


def _shown(delays: list[float]) -> str:
    """``p50 27.1 ms, max 98.3 ms (8 stops)``: the last repetition's stops."""
    return f"p50 {p50(delays) * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms ({len(delays)} stops)"


def _all_started(bench: BenchEnv, jobs: list[Job]) -> bool:
    with bench.deps.redis.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.hget(job.key, "status")
        return all(status == b"started" for status in pipe.execute())
