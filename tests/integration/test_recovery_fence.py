"""An attempt taken for lost while it lived on (real Redis): once the recovery script
hands its run to a later attempt, the earlier one can neither beat, end nor be counted,
and the recovery job starts only the attempt it was queued for (bot.store.recovery)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bot.config import Settings
from bot.deps import Deps
from bot.runs.execute import start_run
from bot.runs.finalize import finalize_run
from bot.runs.recover import recover_run
from bot.store.recovery import Verdict
from bot.types import RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="telegram", account="1", chat="1", thread="2")


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = Deps.build(Settings(redis_url=redis_url))
    yield d
    d.close()


def started(deps: Deps, run_id: str = "r1") -> RunRecord:
    record = RunRecord(
        run_id=run_id, seq=1, session_key="agent:main:telegram:1:topic:2",
        child_session_key="c", session_id="s", thread=THREAD, requester="telegram:1",
        agent_id="main", subagent_type="general-purpose", task="t", model="m",
        created_at=time.time(), job_id=run_id,
    )  # fmt: skip
    deps.runs.create(record)
    start = start_run(deps, run_id, job_id=run_id)
    assert start.started and start.record is not None
    assert start.record.executor == run_id
    return start.record


def test_a_superseded_attempt_cannot_beat_or_end_its_run(deps: Deps) -> None:
    first = started(deps)
    ttl = deps.settings.subagents.stale_after_seconds
    assert deps.runs.beat("r1", ttl=ttl, executor="r1")
    got = recover_run(deps, "r1", dead_job="r1", why="worker process died (pid 1)")
    assert (got.verdict, got.attempt) == (Verdict.RESUMED, 2)
    assert not deps.runs.heartbeat_alive("r1")  # the dead attempt's beat is dropped
    assert not deps.runs.beat("r1", ttl=ttl, executor="r1")  # the old job lives on: fenced
    assert not deps.runs.heartbeat_alive("r1")
    assert not finalize_run(deps, "r1", status=RunStatus.SUCCESS, executor=first.executor)
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.RUNNING
    assert record.executor == "r1-a2" and record.resuming is not None
    # the recovery job starts the new attempt, once; the old job's id starts nothing
    assert not start_run(deps, "r1", recover=True, job_id="r1").started
    again = start_run(deps, "r1", recover=True, job_id="r1-a2")
    assert again.started and again.record is not None and again.record.attempt == 2
    assert not start_run(deps, "r1", recover=True, job_id="r1-a2").started
    assert deps.runs.beat("r1", ttl=ttl, executor="r1-a2")
    assert finalize_run(deps, "r1", status=RunStatus.SUCCESS, result="done", executor="r1-a2")
    ended = deps.runs.get("r1")
    assert ended is not None and ended.status is RunStatus.SUCCESS
    assert "resumed after a worker was lost (1×)" in ended.notes


def test_two_noticers_of_one_death_resume_it_once(deps: Deps) -> None:
    deps.jobs.queue("subagents").enqueue_call("builtins.print", job_id="waiting-run")
    started(deps, "r2")
    verdicts = [recover_run(deps, "r2", dead_job="r2", why=f"noticer {i}").verdict for i in (1, 2)]
    assert verdicts == [Verdict.RESUMED, Verdict.NONE]
    queued = deps.jobs.queue("subagents").get_job_ids()
    assert queued.count("r2-a2") == 1 and queued[0] == "r2-a2"  # the next one a worker pops
    record = deps.runs.get("r2")
    assert record is not None and len(record.attempt_ends) == 1
    assert record.attempt_ends[0].endswith("|noticer 1")


def test_a_stopped_run_is_never_resumed_and_a_poison_pill_is_given_up(deps: Deps) -> None:
    started(deps, "r3")
    deps.runs.request_stop("r3")
    assert recover_run(deps, "r3", dead_job="r3", why="died").verdict is Verdict.STOPPED
    stopped = deps.runs.get("r3")
    assert stopped is not None and stopped.status is RunStatus.STOPPED
    started(deps, "r4")
    job = "r4"
    for attempt in (2, 3):
        assert recover_run(deps, "r4", dead_job=job, why="died").verdict is Verdict.RESUMED
        job = f"r4-a{attempt}"
        assert start_run(deps, "r4", recover=True, job_id=job).started
    gave_up = recover_run(deps, "r4", dead_job=job, why="died")
    assert (gave_up.verdict, gave_up.attempt) == (Verdict.EXHAUSTED, 3)
    record = deps.runs.get("r4")
    assert record is not None and record.status is RunStatus.UNKNOWN
    assert "its worker died 3 times; not resumed again" in record.notes
    assert len(record.attempt_ends) == 3
