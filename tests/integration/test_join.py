"""Fan-in: the join fires exactly once, in Redis, whatever ends its runs and in any order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bot.deps import Deps
from bot.runs.access import Actor
from bot.runs.finalize import finalize_run
from bot.runs.join import (
    JOB_PREFIX,
    JoinPlan,
    cancel_joins,
    chain_exhausted,
    continuation_prompt,
    dispatch,
    dispatch_due,
    join_id_for,
    open_join,
    plan_join,
    seal_abandoned,
    seal_join,
)
from bot.store.jobs import TURNS_QUEUE, TurnJob
from bot.types import FAN_IN_MARK, RunStatus
from tests.integration.test_finalize import deps_for, make_run

SESSION = "agent:main:console:c:thread:t"


def turn_job(**kw: Any) -> TurnJob:
    fields: dict[str, Any] = dict(
        session_key=SESSION,
        thread={"platform": "console", "account": "a", "chat": "c", "thread": "t"},
        platform="console",
        sender_id="alice",
        sender_name="Alice",
        text="compare A, B and C",
        message_id="m1",
    )
    fields.update(kw)
    return TurnJob(**fields)


def opened(deps: Deps, job: TurnJob | None = None) -> JoinPlan:
    plan = plan_join(deps.settings, job or turn_job())
    assert plan is not None
    assert open_join(deps, plan)
    return plan


def joined_runs(deps: Deps, plan: JoinPlan, n: int) -> list[str]:
    ids = [f"r{i}" for i in range(1, n + 1)]
    for i, run_id in enumerate(ids, 1):
        make_run(deps, run_id, seq=i, label=f"L{i}", join_id=plan.join_id)
    return ids


def continuation_jobs(deps: Deps) -> list[str]:
    """Continuation turn jobs that exist; each must also be on the turns queue."""
    ids = sorted(k.decode().removeprefix("rq:job:") for k in deps.redis.keys("rq:job:join-*"))
    assert set(ids) <= set(deps.jobs.queue(TURNS_QUEUE).job_ids)
    return ids


def test_the_last_run_to_end_fires_the_join_once_and_enqueues_one_continuation(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    runs = joined_runs(deps, plan, 3)
    seal_join(deps, plan.join_id)
    assert deps.joins.get(plan.join_id).state == "sealed"  # type: ignore[union-attr]
    finalize_run(deps, runs[0], status=RunStatus.SUCCESS, result="a")
    finalize_run(deps, runs[1], status=RunStatus.ERROR, notes="boom")
    assert continuation_jobs(deps) == []
    finalize_run(deps, runs[2], status=RunStatus.UNKNOWN, notes="worker died")
    join = deps.joins.get(plan.join_id)
    assert join is not None and join.state == "fired" and join.pending == ()
    assert continuation_jobs(deps) == [JOB_PREFIX + plan.join_id]
    job = deps.jobs.fetch(JOB_PREFIX + plan.join_id)
    assert job is not None
    payload = TurnJob.model_validate(job.args[0])
    assert (payload.kind, payload.join_id, payload.chain) == ("join", plan.join_id, 1)
    assert payload.session_key == SESSION and payload.sender_id == "alice"
    # A repeat of every ender and of the dispatch changes nothing.
    for run_id in runs:
        assert not finalize_run(deps, run_id, status=RunStatus.SUCCESS)
    assert not dispatch(deps, plan.join_id, force=True)
    assert dispatch_due(deps) == []
    assert len(continuation_jobs(deps)) == 1


def test_runs_that_all_ended_before_the_turn_did_fire_at_the_seal(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    for run_id in joined_runs(deps, plan, 2):
        finalize_run(deps, run_id, status=RunStatus.SUCCESS, result="x")
    assert deps.joins.get(plan.join_id).state == "open"  # type: ignore[union-attr]
    assert continuation_jobs(deps) == []
    seal_join(deps, plan.join_id)
    assert deps.joins.get(plan.join_id).state == "fired"  # type: ignore[union-attr]
    assert len(continuation_jobs(deps)) == 1


def test_twenty_concurrent_enders_over_ten_runs_fire_one_continuation(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    runs = joined_runs(deps, plan, 10)
    seal_join(deps, plan.join_id)
    statuses = [RunStatus.SUCCESS, RunStatus.UNKNOWN]
    threads = [
        threading.Thread(target=finalize_run, args=(deps_for(redis_url), r), kwargs={"status": s})
        for r in runs
        for s in statuses
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(continuation_jobs(deps)) == 1
    assert deps.joins.get(plan.join_id).state == "fired"  # type: ignore[union-attr]


def test_a_run_spawned_after_the_seal_does_not_join(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    [first] = joined_runs(deps, plan, 1)
    seal_join(deps, plan.join_id)
    late = make_run(deps, "late", seq=2, join_id=plan.join_id)
    stored = deps.runs.get(late.run_id)
    assert stored is not None and stored.join_id == ""
    assert not open_join(deps, plan)  # a retried turn cannot reopen it
    finalize_run(deps, first, status=RunStatus.SUCCESS)
    assert deps.joins.get(plan.join_id).run_ids == (first,)  # type: ignore[union-attr]
    assert len(continuation_jobs(deps)) == 1


def test_stop_cancels_a_pending_join_so_stopping_its_runs_fires_nothing(redis_url: str) -> None:
    deps = deps_for(redis_url, admins=["console:admin"])
    plan = opened(deps)
    runs = joined_runs(deps, plan, 2)
    seal_join(deps, plan.join_id)
    records = [r for r in (deps.runs.get(i) for i in runs) if r]
    bob = Actor(platform="console", user_id="bob", admins=deps.settings.admins)
    assert cancel_joins(deps, SESSION, records, actor=bob) == 0  # not his message
    alice = Actor(platform="console", user_id="alice", admins=deps.settings.admins)
    assert cancel_joins(deps, SESSION, records, actor=alice) == 1
    for run_id in runs:
        assert finalize_run(deps, run_id, status=RunStatus.STOPPED)
    assert deps.joins.get(plan.join_id).state == "cancelled"  # type: ignore[union-attr]
    assert continuation_jobs(deps) == []
    assert deps.joins.of_session(SESSION) == []


def test_stop_also_cancels_a_fired_join_whose_continuation_has_not_started(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    [run_id] = joined_runs(deps, plan, 1)
    seal_join(deps, plan.join_id)
    finalize_run(deps, run_id, status=RunStatus.SUCCESS)
    assert deps.joins.of_session(SESSION) == [plan.join_id]
    assert cancel_joins(deps, SESSION, []) == 1
    assert not deps.joins.start(plan.join_id)  # the queued continuation will do nothing


def test_only_one_continuation_starts(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    [run_id] = joined_runs(deps, plan, 1)
    seal_join(deps, plan.join_id)
    finalize_run(deps, run_id, status=RunStatus.SUCCESS)
    results = [deps.joins.start(plan.join_id) for _ in range(5)]
    assert results == [True, False, False, False, False]
    assert cancel_joins(deps, SESSION, []) == 0  # started: /stop stops the turn instead


def test_the_sweep_dispatches_a_join_whose_firer_died(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    [run_id] = joined_runs(deps, plan, 1)
    seal_join(deps, plan.join_id)
    record = deps.runs.get(run_id)
    assert record is not None
    # The finalize script fires, then its process dies before dispatching.
    from bot.store.runs import Finalization

    assert deps.runs.end(record, Finalization(status=RunStatus.SUCCESS)).code == 2
    assert continuation_jobs(deps) == []
    assert dispatch_due(deps) == []  # within the firer's grace
    deps.redis.zadd(deps.keys.joins_ready, {plan.join_id: time.time() - 1})
    assert dispatch_due(deps) == [plan.join_id]
    assert dispatch_due(deps) == []
    assert len(continuation_jobs(deps)) == 1


def test_the_sweep_seals_a_join_whose_turn_died(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    [run_id] = joined_runs(deps, plan, 1)
    finalize_run(deps, run_id, status=RunStatus.SUCCESS)
    assert seal_abandoned(deps) == []  # its turn may still be running
    later = time.time() + deps.settings.turn_timeout_seconds + 120
    assert seal_abandoned(deps, now=later) == [plan.join_id]
    assert len(continuation_jobs(deps)) == 1


def test_chain_rounds_stop_at_max_chain(redis_url: str) -> None:
    deps = deps_for(redis_url, subagents={"max_chain": 2})
    s = deps.settings
    assert plan_join(s, turn_job(chain=0)).round == 1  # type: ignore[union-attr]
    assert plan_join(s, turn_job(chain=1)).round == 2  # type: ignore[union-attr]
    assert plan_join(s, turn_job(chain=2)) is None
    assert chain_exhausted(s, turn_job(chain=2))
    assert not chain_exhausted(s, turn_job(chain=1))
    cards = deps_for(redis_url, subagents={"announce": "cards"}).settings
    assert plan_join(cards, turn_job()) is None and not chain_exhausted(cards, turn_job())


def test_join_ids_are_stable_per_message_and_differ_between_messages() -> None:
    assert join_id_for(SESSION, "m1") == join_id_for(SESSION, "m1")
    assert join_id_for(SESSION, "m1") != join_id_for(SESSION, "m2")
    assert join_id_for(SESSION, "m1") != join_id_for(SESSION + "x", "m1")


def test_the_prompt_lists_every_status_and_repeats_results_history_lost(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    runs = joined_runs(deps, plan, 3)
    finalize_run(deps, runs[0], status=RunStatus.SUCCESS, result="alpha result")
    finalize_run(deps, runs[1], status=RunStatus.ERROR, result="", notes="boom")
    finalize_run(deps, runs[2], status=RunStatus.STOPPED, result="gamma partial")
    join = deps.joins.get(plan.join_id)
    assert join is not None
    history = deps.history.load(SESSION)
    prompt = continuation_prompt(deps, join, history)
    assert prompt.startswith(FAN_IN_MARK)
    assert '- Subagent #1 "L1" (general-purpose): success' in prompt
    assert '- Subagent #2 "L2" (general-purpose): error' in prompt
    assert '- Subagent #3 "L3" (general-purpose): stopped' in prompt
    assert "alpha result" not in prompt  # the history notes hold the results
    trimmed = [m for m in history if "L1" not in str(m.get("content"))]
    prompt = continuation_prompt(deps, join, trimmed)
    assert "alpha result" in prompt and "gamma partial" not in prompt


def test_a_run_that_answered_announce_skip_is_listed_without_the_sentinel(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    runs = joined_runs(deps, plan, 2)
    finalize_run(deps, runs[0], status=RunStatus.SUCCESS, result="alpha result")
    finalize_run(deps, runs[1], status=RunStatus.SUCCESS, result="  ANNOUNCE_SKIP\n")
    join = deps.joins.get(plan.join_id)
    assert join is not None
    history = deps.history.load(SESSION)
    assert "ANNOUNCE_SKIP" not in str(history)  # the quiet run wrote no note
    for seen in (history, []):  # with its notes in the history, and with none left
        prompt = continuation_prompt(deps, join, seen)
        assert '- Subagent #2 "L2" (general-purpose): finished without a result to show' in prompt
        assert "ANNOUNCE_SKIP" not in prompt and "L2" not in prompt.partition("not shown")[2]
    assert "alpha result" in continuation_prompt(deps, join, [])


@pytest.mark.parametrize("mode", ["cards", "synthesis", "both"])
def test_announce_modes(redis_url: str, mode: str) -> None:
    deps = deps_for(redis_url, subagents={"announce": mode})
    plan = plan_join(deps.settings, turn_job())
    if mode == "cards":
        assert plan is None
        make_run(deps, "r1", label="L1")
    else:
        assert plan is not None and open_join(deps, plan)
        joined_runs(deps, plan, 1)
    finalize_run(deps, "r1", status=RunStatus.SUCCESS, result="the full result")
    [(_, fields)] = deps.redis.xrange(deps.keys.outbox)
    text = fields[b"data"].decode()
    if mode == "synthesis":
        assert "the full result" not in text and "Status:" not in text
        assert 'Subagent #1 \\"L1\\" (general-purpose) finished \\u00b7 ' in text
    else:
        assert "the full result" in text and "Status: success" in text
