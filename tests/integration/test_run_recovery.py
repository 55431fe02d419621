"""The recovery decision against real Redis (:mod:`bot.store.recovery`, :mod:`bot.runs.recover`):
fenced on the dead job, so noticers of one death resume a run once; a stopped run is never
resumed; one death too many ends it unknown; the reaper resumes a run whose heartbeat
lapsed and leaves its queued recovery job alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.runs.line import slot_job
from bot.runs.recover import exhausted_note, recover_run
from bot.store.jobs import SUBAGENTS_QUEUE, RunJobSpec
from bot.store.recovery import Verdict
from bot.types import RunRecord, RunStatus
from tests.integration.test_control_redis import announces, spawn_run
from workers.maintenance import reap

STALE = 0.3


def make_deps(redis_url: str, **sub: object) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"heartbeat_seconds": 0.05, "stale_after_seconds": STALE, **sub},  # type: ignore[arg-type]
    )
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url)
    yield d
    d.close()


def executing(deps: Deps, *, task: str = "t") -> RunRecord:
    """A run its own job (id = run id) executes now."""
    record = spawn_run(deps, task=task)
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(record.run_id)  # "popped" by a worker
    assert deps.runs.start(record.run_id, heartbeat_ttl=60, job_id=record.run_id).started
    got = deps.runs.get(record.run_id)
    assert got is not None
    return got


def queued_jobs(deps: Deps) -> list[str]:
    return list(deps.jobs.queue(SUBAGENTS_QUEUE).job_ids)


def test_two_noticers_of_one_death_resume_the_run_once(deps: Deps) -> None:
    record = executing(deps)
    first = recover_run(deps, record.run_id, dead_job=record.run_id, why="worker process died")
    second = recover_run(deps, record.run_id, dead_job=record.run_id, why="no heartbeat")
    assert (first.verdict, first.attempt) == (Verdict.RESUMED, 2)
    assert second.verdict is Verdict.NONE
    after = deps.runs.get(record.run_id)
    assert after is not None and after.status is RunStatus.RUNNING
    assert after.attempt == 2 and after.executor == f"{record.run_id}-a2"
    assert after.resuming is not None
    assert [e.split("|", 1)[1] for e in after.attempt_ends] == ["worker process died"]
    assert queued_jobs(deps) == [f"{record.run_id}-a2"]
    assert not deps.runs.heartbeat_alive(record.run_id)  # the dead attempt's, dropped


def test_racing_noticers_resume_once(deps: Deps) -> None:
    """The script decides alone: noticers racing past the Python checks still resume once."""
    record = executing(deps)
    got: list[Verdict] = []
    barrier = threading.Barrier(8)

    def notice() -> None:
        barrier.wait()
        job = deps.jobs.recovery_job(_spec_of(deps, record), attempt=2)  # as recover_run
        got.append(
            deps.recovery.recover(
                record.run_id,
                job,
                deps.jobs.queue(SUBAGENTS_QUEUE),
                dead_job=record.run_id,
                max_resumes=2,
                why="race",
            ).verdict
        )

    threads = [threading.Thread(target=notice) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(got) == [Verdict.NONE] * 7 + [Verdict.RESUMED]
    assert queued_jobs(deps) == [f"{record.run_id}-a2"]


def _spec_of(deps: Deps, record: RunRecord) -> RunJobSpec:
    return slot_job(deps.settings, record, run_id=record.run_id, description="recovery")


def test_the_death_of_a_superseded_attempt_changes_nothing(deps: Deps) -> None:
    record = executing(deps)
    recover_run(deps, record.run_id, dead_job=record.run_id, why="first")
    again = recover_run(deps, record.run_id, dead_job=record.run_id, why="late noticer")
    direct = deps.recovery.recover(
        record.run_id,
        deps.jobs.recovery_job(_spec_of(deps, record), attempt=9),
        deps.jobs.queue(SUBAGENTS_QUEUE),
        dead_job=record.run_id,
        max_resumes=2,
        why="late noticer, past the Python check",
    )
    assert again.verdict is Verdict.NONE and direct.verdict is Verdict.NONE
    after = deps.runs.get(record.run_id)
    assert after is not None and after.attempt == 2 and len(after.attempt_ends) == 1
    assert queued_jobs(deps) == [f"{record.run_id}-a2"]


def test_a_stopped_run_whose_worker_died_ends_stopped_and_is_not_resumed(deps: Deps) -> None:
    record = executing(deps)
    deps.runs.request_stop(record.run_id)
    got = recover_run(deps, record.run_id, dead_job=record.run_id, why="worker process died")
    assert got.verdict is Verdict.STOPPED
    after = deps.runs.get(record.run_id)
    assert after is not None and after.status is RunStatus.STOPPED and after.attempt == 1
    assert "its worker was lost meanwhile" in after.notes
    assert queued_jobs(deps) == []
    assert len(announces(deps)) == 1


def test_one_death_too_many_ends_the_run_unknown(redis_url: str) -> None:
    deps = make_deps(redis_url, max_resumes=1)
    try:
        record = executing(deps)
        assert recover_run(deps, record.run_id, dead_job=record.run_id, why="1").verdict == 1
        job = f"{record.run_id}-a2"
        deps.jobs.queue(SUBAGENTS_QUEUE).remove(job)
        assert deps.runs.start(record.run_id, heartbeat_ttl=60, recover=True, job_id=job).started
        got = recover_run(deps, record.run_id, dead_job=job, why="2")
        assert (got.verdict, got.attempt) == (Verdict.EXHAUSTED, 2)
        after = deps.runs.get(record.run_id)
        assert after is not None and after.status is RunStatus.UNKNOWN
        assert after.notes == exhausted_note(2) == "its worker died 2 times; not resumed again"
        assert exhausted_note(1) == "its worker died 1 time; not resumed again"
        assert queued_jobs(deps) == [] and len(announces(deps)) == 1
    finally:
        deps.close()


def test_a_recovery_job_starts_only_the_attempt_it_was_queued_for(deps: Deps) -> None:
    record = executing(deps)
    recover_run(deps, record.run_id, dead_job=record.run_id, why="x")
    stale = deps.runs.start(record.run_id, heartbeat_ttl=60, recover=True, job_id="other-a9")
    assert not stale.started
    fresh = f"{record.run_id}-a2"
    start = deps.runs.start(record.run_id, heartbeat_ttl=60, recover=True, job_id=fresh)
    assert start.started and start.record is not None and start.record.attempt == 2
    again = deps.runs.start(record.run_id, heartbeat_ttl=60, recover=True, job_id=fresh)
    assert not again.started  # a redelivered recovery job does not start it twice


def test_a_parked_run_is_not_resumed(deps: Deps) -> None:
    record = executing(deps)
    deps.runs.park(record.run_id, rounds=0)
    got = recover_run(deps, record.run_id, dead_job=record.run_id, why="x")
    assert got.verdict is Verdict.NONE
    after = deps.runs.get(record.run_id)
    assert after is not None and after.attempt == 1 and queued_jobs(deps) == []


def test_the_reaper_resumes_a_run_without_heartbeat_once(deps: Deps) -> None:
    record = spawn_run(deps)
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(record.run_id)
    assert deps.runs.start(record.run_id, heartbeat_ttl=0.01, job_id=record.run_id).started
    time.sleep(STALE * 2)
    assert reap(deps) == [record.run_id]
    assert reap(deps) == []  # its recovery job is queued: nothing lost
    after = deps.runs.get(record.run_id)
    assert after is not None and after.status is RunStatus.RUNNING and after.attempt == 2
    assert "no heartbeat" in after.attempt_ends[0]
    assert queued_jobs(deps) == [f"{record.run_id}-a2"]
