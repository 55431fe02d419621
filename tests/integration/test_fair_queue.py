"""The fair line for subagent slots against real Redis and RQ (no workers: jobs stay queued)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.config import Settings
from bot.deps import Deps
from bot.runs.approval_gate import resume
from bot.runs.finalize import finalize_run
from bot.runs.line import show_places
from bot.runs.stop import stop_run
from bot.store.approvals import ApprovalKind, ApprovalRecord
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.store.progress import decode as decode_progress
from bot.store.runs import Finalization
from bot.types import RunRecord, RunStatus, ThreadRef
from tests.integration.test_control_redis import command, spawn_run
from workers.maintenance import sweep
from workers.repair import repair_jobs

A = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
B = ThreadRef(platform="slack", account="T1", chat="C1", thread="2.0")
C = ThreadRef(platform="slack", account="T1", chat="C1", thread="3.0")


def make_deps(redis_url: str, **subagents: object) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"max_spawns_per_turn": 50, **subagents},  # type: ignore[arg-type]
    )
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url, max_concurrent=2)
    yield d
    d.close()


def queued(deps: Deps) -> list[str]:
    return deps.jobs.queue(SUBAGENTS_QUEUE).get_job_ids()


def status(deps: Deps, job_id: str) -> JobStatus | None:
    return Job.fetch(job_id, connection=deps.redis, serializer=JSONSerializer).get_status()


def end(deps: Deps, record: RunRecord) -> None:
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(record.job_id)  # as if a worker had taken it
    assert finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="ok")


def test_the_next_free_slot_goes_to_the_session_holding_none(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(6)]
    assert queued(deps) == [a[0].job_id, a[1].job_id]
    assert status(deps, a[2].job_id) is JobStatus.RATE_LIMITED
    [b] = [spawn_run(deps, thread=B, task="b")]
    assert deps.jobs.subagent_line()[:3] == [a[0].job_id, a[1].job_id, b.job_id]

    end(deps, a[0])

    assert queued(deps) == [a[1].job_id, b.job_id]  # not a[2], spawned long before b
    assert deps.jobs.subagent_line()[2:] == [r.job_id for r in a[2:]]
    end(deps, a[1])
    end(deps, b)
    assert queued(deps) == [a[2].job_id, a[3].job_id]


def test_sessions_with_backlogs_take_turns(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(4)]
    b = [spawn_run(deps, thread=B, task=f"b{i}") for i in range(3)]
    c = [spawn_run(deps, thread=C, task=f"c{i}") for i in range(3)]
    started = [a[0], a[1]]
    order = []
    while started:
        done = started.pop(0)
        before = set(queued(deps))
        end(deps, done)
        new = [i for i in queued(deps) if i not in before]
        order += new
        started += [r for r in a + b + c if r.job_id in new]
    name = {r.job_id: r.task for r in a + b + c}
    assert [name[i] for i in order] == ["b0", "c0", "a2", "b1", "c1", "a3", "b2", "c2"]


def test_a_session_at_its_cap_waits_while_others_use_the_free_slots(redis_url: str) -> None:
    deps = make_deps(redis_url, max_concurrent=4, max_concurrent_per_session=2)
    try:
        a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(4)]
        assert queued(deps) == [a[0].job_id, a[1].job_id]  # two slots stay free for others
        b = [spawn_run(deps, thread=B, task=f"b{i}") for i in range(3)]
        assert queued(deps) == [a[0].job_id, a[1].job_id, b[0].job_id, b[1].job_id]
        end(deps, a[0])
        assert queued(deps)[-1] == a[2].job_id  # A is below its cap again; B is at its own
        assert deps.jobs.subagent_line()[-2:] == [b[2].job_id, a[3].job_id]
    finally:
        deps.close()


def test_stopping_a_waiting_run_lets_the_next_one_start(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(4)]
    stopped = stop_run(deps, a[2].run_id, by="alice")
    assert stopped.ended and not stopped.hard_stop_sent
    assert status(deps, a[2].job_id) is JobStatus.CANCELED
    assert a[2].job_id not in deps.jobs.subagent_line()

    end(deps, a[0])

    assert queued(deps) == [a[1].job_id, a[3].job_id]
    assert deps.jobs.waiting_for_slot() == 0


def test_stopping_an_admitted_run_frees_its_slot_for_the_next(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(3)]
    stop_run(deps, a[0].run_id, by="alice")
    assert queued(deps) == [a[1].job_id, a[2].job_id]


def test_concurrent_admissions_hand_out_each_slot_once(redis_url: str) -> None:
    deps = make_deps(redis_url, max_concurrent=5)
    try:
        runs = [spawn_run(deps, thread=t, task=f"{t.thread}{i}") for i in range(8) for t in (A, B)]
        holders = deps.jobs.fair.holders()
        assert len(holders) == 5
        for record in runs:  # free every slot behind the admission's back
            if record.run_id in holders:
                deps.jobs.queue(SUBAGENTS_QUEUE).remove(record.job_id)
                deps.runs.update(record.run_id, status="success")
                deps.jobs.fair.release(record.run_id)
        admitted: list[str] = []
        gate = threading.Barrier(8)

        def admit() -> None:
            mine = make_deps(redis_url, max_concurrent=5)
            gate.wait()
            for _ in range(5):
                admitted.extend(mine.jobs.refill_subagent_slots(5))
            mine.close()

        threads = [threading.Thread(target=admit) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(admitted) == len(set(admitted)) == 5
        assert sorted(queued(deps)) == sorted(admitted)
    finally:
        deps.close()


def test_the_sweep_requeues_an_admitted_job_a_dead_worker_dropped(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(3)]
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(a[0].job_id)  # popped by a worker that died
    grace = deps.settings.subagents.stale_after_seconds
    t0 = a[0].created_at + 1
    repair_jobs(deps, now=t0)
    assert repair_jobs(deps, now=t0 + grace + 1).requeued == [a[0].job_id]
    assert queued(deps) == [a[0].job_id, a[1].job_id]


def test_the_sweep_frees_a_slot_whose_run_ended_and_admits_the_next(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(3)]
    # a run ended by a process that died before the slot was given on
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(a[0].job_id)
    deps.redis.zadd(deps.keys.fair_slots, {a[0].run_id: 1})
    deps.runs.update(a[0].run_id, status="success")
    Job.fetch(a[0].job_id, connection=deps.redis, serializer=JSONSerializer).set_status(
        JobStatus.FINISHED
    )
    sweep(deps)
    assert a[0].run_id not in deps.jobs.fair.holders()
    assert queued(deps) == [a[1].job_id, a[2].job_id]


def test_the_list_and_the_status_cards_show_the_fair_place_in_line(deps: Deps) -> None:
    [spawn_run(deps, thread=A, task=f"a{i}") for i in range(4)]
    spawn_run(deps, thread=B, task="b")
    # a0 and a1 hold the slots (on RQ's queue, no worker yet); b goes before a2 and a3
    listed = command(deps, "/subagents list")
    assert "#3 ⏳ queued #4 in line" in listed and "#4 ⏳ queued #5 in line" in listed
    cards = [f[b"text"].decode() for _, f in deps.redis.xrange(deps.keys.progress) if b"text" in f]
    assert cards[-3:] == ["queued · #3 in line", "queued · #4 in line", "queued · #5 in line"]


def test_the_places_skip_a_run_that_started_and_keep_each_cards_thread(deps: Deps) -> None:
    runs = [spawn_run(deps, thread=A, task="a0"), spawn_run(deps, thread=A, task="a1")]
    runs += [spawn_run(deps, thread=B, task="b0"), spawn_run(deps, thread=A, task="a2")]
    deps.runs.update(runs[3].run_id, status="running")  # started meanwhile
    deps.redis.delete(deps.keys.progress)
    show_places(deps)
    entries = deps.redis.xrange(deps.keys.progress)
    events = [decode_progress({k.decode(): v.decode() for k, v in f.items()}) for _, f in entries]
    shown = {e.run_id: (e.thread, e.text) for e in events if e is not None}
    assert shown == {
        runs[0].run_id: (A, "queued · #1 in line"),
        runs[1].run_id: (A, "queued · #2 in line"),
        runs[2].run_id: (B, "queued · #3 in line"),
    }


def test_prune_forgets_sessions_that_neither_wait_nor_hold(deps: Deps) -> None:
    a = spawn_run(deps, thread=A, task="a")
    assert deps.jobs.fair.prune() == 0  # A holds a slot
    end(deps, a)
    assert deps.jobs.fair.prune() == 1
    assert deps.redis.hlen(deps.keys.fair_served) == 0


def test_a_slot_freed_by_a_process_that_died_before_admitting_is_given_on_by_the_sweep(
    deps: Deps,
) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(3)]
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(a[0].job_id)
    # the terminal transition alone (the Lua script), as if its process died right after
    outcome = Finalization(status=RunStatus.SUCCESS, result="ok")
    assert deps.runs.end(a[0], outcome, slot_key=deps.jobs.subagent_slot_key()).code
    assert queued(deps) == [a[1].job_id]
    sweep(deps)
    assert queued(deps) == [a[1].job_id, a[2].job_id]


def test_the_sweep_puts_back_in_line_a_run_whose_line_was_lost(deps: Deps) -> None:
    a = [spawn_run(deps, thread=A, task=f"a{i}") for i in range(4)]
    old_lane = a[3]  # a run queued before the upgrade waits in RQ's own lane instead
    deps.redis.hset(f"rq:job:{old_lane.job_id}", "rate_limit_key", "subagents")
    deps.redis.delete(deps.keys.fair_waiting(a[0].session_key))  # lost with Redis's last writes
    grace = deps.settings.subagents.stale_after_seconds
    assert repair_jobs(deps, now=a[0].created_at + 0.1).rejoined == []  # just spawned
    done = repair_jobs(deps, now=a[-1].created_at + grace + 1)
    assert done.rejoined == [a[2].run_id]
    assert deps.jobs.subagent_line()[-1] == a[2].job_id


def parked_for_approval(deps: Deps) -> RunRecord:
    """A run a worker took and parked for approval ``ab12cd34`` (its slot freed)."""
    run = spawn_run(deps, thread=A, task="t")
    deps.jobs.queue(SUBAGENTS_QUEUE).remove(run.job_id)
    Job.fetch(run.job_id, connection=deps.redis, serializer=JSONSerializer).set_status(
        JobStatus.FINISHED
    )
    deps.runs.update(run.run_id, status="running")
    deps.runs.park(run.run_id, rounds=0, approval_id="ab12cd34")
    assert deps.jobs.fair.release(run.run_id)
    return run


def decide(deps: Deps, run: RunRecord) -> None:
    """Its approval decided: the resume job ``approval-ab12cd34`` joins the line."""
    approval = SimpleNamespace(
        run_id=run.run_id, approval_id="ab12cd34", kind=ApprovalKind.TOOL, for_turn=False
    )
    resume(deps, cast(ApprovalRecord, approval))


def test_the_sweep_leaves_the_slot_of_an_admitted_resume_job_alone(deps: Deps) -> None:
    """A parked run's resume job was admitted (it holds the run's slot under the run's id)
    and waits for a worker: the repair must not free that slot as the finished first job's."""
    run = parked_for_approval(deps)
    decide(deps, run)
    assert queued(deps) == ["approval-ab12cd34"]
    stored = deps.runs.get(run.run_id)
    assert stored is not None and stored.resume_job == "approval-ab12cd34"
    now = time.time()
    assert repair_jobs(deps, now=now).released == []
    assert repair_jobs(deps, now=now + 60).released == []
    assert deps.jobs.fair.holders() == [run.run_id]
    # Once the resume job has run and the run parked again, the slot is free to go.
    Job.fetch("approval-ab12cd34", connection=deps.redis, serializer=JSONSerializer).set_status(
        JobStatus.FINISHED
    )
    assert repair_jobs(deps, now=now + 120).released == [run.run_id]


def test_the_sweep_requeues_a_resume_job_a_dead_worker_dropped(deps: Deps) -> None:
    run = parked_for_approval(deps)
    decide(deps, run)
    deps.jobs.queue(SUBAGENTS_QUEUE).remove("approval-ab12cd34")  # popped by a worker that died
    grace = deps.settings.subagents.stale_after_seconds
    now = time.time()
    assert repair_jobs(deps, now=now).requeued == []  # a live worker may still start it
    assert repair_jobs(deps, now=now + grace + 1).requeued == ["approval-ab12cd34"]
    assert queued(deps) == ["approval-ab12cd34"]
    assert deps.jobs.fair.holders() == [run.run_id]


def test_stopping_a_parked_run_takes_its_waiting_resume_job_out_of_the_line(deps: Deps) -> None:
    """The approval was decided while every slot was taken, so the resume job waits in the
    line; stopping the run cancels it there, and the next free slot goes to a real run."""
    run = parked_for_approval(deps)
    busy = [spawn_run(deps, thread=B, task=f"b{i}") for i in range(2)]  # both slots taken
    decide(deps, run)
    line = deps.keys.fair_waiting(run.session_key)
    assert deps.redis.lrange(line, 0, -1) == [b"approval-ab12cd34"]
    waiting = spawn_run(deps, thread=C, task="c")

    assert stop_run(deps, run.run_id, by="@ann").ended

    assert deps.redis.lrange(line, 0, -1) == []
    assert status(deps, "approval-ab12cd34") is JobStatus.CANCELED
    end(deps, busy[0])
    assert queued(deps) == [busy[1].job_id, waiting.job_id]
    stored = deps.runs.get(run.run_id)
    assert stored is not None and stored.status is RunStatus.STOPPED and not stored.resume_job


def _admitted_state(deps: Deps, run: RunRecord) -> dict[str, object]:
    """What an admission leaves of ``run`` (its times and own id's fields aside)."""
    job = deps.redis.hgetall(Job.key_for(run.job_id))
    assert job[b"enqueued_at"]
    own = (b"enqueued_at", b"created_at", b"data", b"description")
    return {
        "job": {k: v for k, v in job.items() if k not in own},
        "queued": queued(deps) == [run.job_id],
        "slot": deps.redis.zscore(deps.keys.fair_slots, run.job_id) is not None,
        "served": deps.redis.hget(deps.keys.fair_served, run.session_key),
        "ring": deps.redis.zrange(deps.keys.fair_sessions, 0, -1),
        "line": deps.redis.llen(deps.keys.fair_waiting(run.session_key)),
    }


def test_a_run_taking_a_free_slot_at_once_is_admitted_as_through_the_line(
    deps: Deps, redis_url: str
) -> None:
    deps.redis.config_resetstat()
    free = spawn_run(deps, thread=A, task="free")  # nobody waits, a slot is free
    stats = deps.redis.info("commandstats")
    assert "cmdstat_lpos" not in stats and "cmdstat_lpop" not in stats  # never in the line
    fast = _admitted_state(deps, free)
    deps.redis.flushall()
    capped = make_deps(redis_url, max_concurrent=2, max_concurrent_per_session=2)
    try:
        lined = _admitted_state(capped, spawn_run(capped, thread=A, task="free"))  # the line
    finally:
        capped.close()
    assert fast == lined
    assert fast["job"][b"status"] == b"queued" and fast["queued"] and fast["slot"]  # type: ignore[index]
