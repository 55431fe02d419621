"""``fanbot bench compare``'s Redis figure: commands per subagent run, spawn -> announce
delivered, and per bare RQ no-op job, enqueue -> finished (:mod:`bot.bench.redis_commands`).

Each side first waits until nothing is at work (no Telegram call but the gateway's long
poll for :data:`QUIET_SECONDS`), then counts the idle traffic for ``idle_seconds``, then a
batch of ``command_runs`` runs (instant model) or no-op jobs. fanbot's batch ends
:data:`QUIET_SECONDS` after the last Telegram call (the announces, then the status cards'
final edits), so the gateway's bookkeeping after its last send is in the window; this side
waits on the fakes, never on Redis. The bare batch's end is polled on Redis, and those
polls are taken out of the count.
"""

from __future__ import annotations

import time
from collections import Counter

from rq.job import Job

from bot.bench import bare, redis_commands
from bot.bench.compare_env import (
    POLL,
    BenchEnv,
    CompareError,
    spawn_runs,
    wait_announced,
    wait_quiet,
)


def commands(bench: BenchEnv) -> None:
    """fanbot: the Redis commands of ``command_runs`` runs, per run."""
    redis = bench.deps.redis
    runs = bench.config.command_runs
    bench.model.delay = 0.0
    wait_quiet(bench)
    idle = redis_commands.idle_traffic(redis, bench.config.idle_seconds)

    def batch() -> None:
        spawned = spawn_runs(bench, runs)
        wait_announced(bench, spawned, timeout=runs + 60)
        wait_quiet(bench)

    costs = redis_commands.per_unit(redis_commands.measure(redis, batch), idle, runs)
    bench.add("commands", bench.side, redis_commands.total(costs))
    bench.detail(f"Redis commands per run, {bench.side}", redis_commands.top(costs))


def bare_commands(bench: BenchEnv) -> None:
    """bare RQ: the Redis commands of ``command_runs`` no-op jobs, per job."""
    redis = bench.deps.redis
    count = bench.config.command_runs
    wait_quiet(bench)
    idle = redis_commands.idle_traffic(redis, bench.config.idle_seconds)
    own: Counter[str] = Counter()

    def batch() -> None:
        jobs = [bench.queue.enqueue(bare.noop, result_ttl=600) for _ in range(count)]
        own["hget"] += _wait_counting(bench, jobs)

    costs = redis_commands.per_unit(redis_commands.measure(redis, batch), idle, count, own=own)
    bench.add("commands", "bare", redis_commands.total(costs))
    bench.detail("Redis commands per no-op job, bare RQ", redis_commands.top(costs))


def _wait_counting(bench: BenchEnv, jobs: list[Job]) -> int:
    """Poll until every job ended; returns the ``HGET``s the polls sent."""
    sent = 0
    deadline = time.monotonic() + 60
    while True:
        with bench.deps.redis.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.hget(job.key, "status")
            statuses = pipe.execute()
        sent += len(jobs)
        if all(s in (b"finished", b"failed") for s in statuses):
            return sent
        if time.monotonic() > deadline:
            raise CompareError(f"{len(jobs)} bare jobs did not end in 60s")
        time.sleep(POLL)
