"""Run trees in Redis: orphans are stopped and reported, spawn limits, a parked parent."""

from __future__ import annotations

import time

import pytest

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.errors import SpawnRejected
from bot.runs.finalize import finalize_run
from bot.runs.join import may_nest, plan_run_join
from bot.runs.stop import CASCADE_GRACE_SECONDS, stop_orphans, stop_run
from bot.types import RunStatus
from tests.integration.test_finalize import deps_for, make_run

LEAD = {"name": "lead", "role": "orchestrator"}


def outbox_texts(deps) -> list[str]:  # type: ignore[no-untyped-def]
    return [f[b"data"].decode() for _, f in deps.redis.xrange(deps.keys.outbox)]


def test_children_of_a_parent_that_died_are_stopped_and_the_thread_is_told(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url, subagent_types=[LEAD], subagents={"max_spawn_depth": 3})
    parent = make_run(deps, "p", seq=1, subagent_type="lead", status=RunStatus.RUNNING)
    kid = make_run(deps, "k", seq=2, parent_run_id="p", root_run_id="p", depth=2)
    finalize_run(deps, "p", status=RunStatus.UNKNOWN, notes="worker died")
    assert [r.run_id for r in stop_orphans(deps)] == ["k"]
    record = deps.runs.get("k")
    assert record is not None and record.status is RunStatus.STOPPED
    assert "its parent ended: unknown" in record.notes
    texts = outbox_texts(deps)
    assert (
        sum("Stopped subagent #2" in t and "its parent #1 ended unknown" in t for t in texts) == 1
    )
    assert not any('"Subagent #2' in t for t in texts)  # the child never announces
    assert stop_orphans(deps) == []
    assert parent.run_id == "p" and kid.depth == 2


def test_a_stopped_parent_stops_its_descendants_without_a_notice(redis_url: str) -> None:
    deps = deps_for(redis_url, subagent_types=[LEAD], subagents={"max_spawn_depth": 3})
    make_run(deps, "p", seq=1, subagent_type="lead")
    make_run(deps, "k", seq=2, parent_run_id="p", root_run_id="p", depth=2, subagent_type="lead")
    make_run(deps, "g", seq=3, parent_run_id="k", root_run_id="p", depth=3)
    stop_run(deps, "p", by="console:alice")
    statuses = {i: deps.runs.get(i).status for i in "pkg"}  # type: ignore[union-attr]
    assert set(statuses.values()) == {RunStatus.STOPPED}
    texts = outbox_texts(deps)
    assert len(texts) == 1 and "Subagent #1" in texts[0]  # only the root announces


def test_the_sweep_leaves_a_just_stopped_parents_children_to_its_cascade(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url, subagent_types=[LEAD], subagents={"max_spawn_depth": 3})
    make_run(deps, "p", seq=1, subagent_type="lead", status=RunStatus.RUNNING)
    make_run(deps, "k", seq=2, parent_run_id="p", root_run_id="p", depth=2)
    # The stop has ended the parent and not yet reached its child (another process).
    finalize_run(deps, "p", status=RunStatus.STOPPED, notes="stopped by slack:U1")
    assert stop_orphans(deps) == []
    kid = deps.runs.get("k")
    assert kid is not None and not kid.status.terminal
    # A cascade that never came (its process died): the sweep stops it after the grace.
    deps.runs.update("p", ended_at=time.time() - CASCADE_GRACE_SECONDS - 1)
    assert [r.run_id for r in stop_orphans(deps)] == ["k"]


def test_only_orchestrators_below_the_depth_limit_may_spawn(redis_url: str) -> None:
    deps = deps_for(
        redis_url,
        subagent_types=[LEAD],
        subagents={"max_spawn_depth": 2, "max_children_per_run": 1},
    )
    s = deps.settings
    lead = make_run(deps, "p", seq=1, subagent_type="lead", status=RunStatus.RUNNING)
    leaf = make_run(deps, "l", seq=2, status=RunStatus.RUNNING)
    deep = make_run(deps, "d", seq=3, subagent_type="lead", depth=2, status=RunStatus.RUNNING)
    assert may_nest(s, lead) and not may_nest(s, leaf) and not may_nest(s, deep)
    assert plan_run_join(s, lead, 0) is not None and plan_run_join(s, lead, 4) is None

    def ctx(record):  # type: ignore[no-untyped-def]
        return ToolContext(
            deps=deps,
            session_key=record.child_session_key,
            thread=record.thread,
            requester=record.requester,
            agent_id="main",
            run_id=record.run_id,
            join=plan_run_join(s, record, 0),
        )

    with pytest.raises(SpawnRejected, match="only an orchestrator"):
        spawn(ctx(leaf), SpawnArgs(task="x"))
    with pytest.raises(SpawnRejected, match="only an orchestrator"):
        spawn(ctx(deep), SpawnArgs(task="x"))
    answer = spawn(ctx(lead), SpawnArgs(task="part", join=False))
    child = deps.runs.get(str(answer["runId"]))
    assert child is not None and child.parent_run_id == "p" and child.depth == 2
    assert child.join_id == "p-1" and answer["join"] is True  # a child always joins
    assert child.session_key == lead.session_key  # numbered and listed with the thread's
    with pytest.raises(SpawnRejected, match="at most 1 subagents per run"):
        spawn(ctx(lead), SpawnArgs(task="another"))
    deps.runs.request_stop("p")
    with pytest.raises(SpawnRejected, match="ending"):
        spawn(ctx(lead), SpawnArgs(task="late"))


def test_the_reaper_leaves_a_parked_parent_alone(redis_url: str) -> None:
    from workers.maintenance import reap

    deps = deps_for(redis_url, subagent_types=[LEAD], subagents={"max_spawn_depth": 2})
    make_run(deps, "p", seq=1, subagent_type="lead", status=RunStatus.RUNNING, started_at=1.0)
    deps.runs.park("p", rounds=1)
    assert reap(deps) == []
    assert deps.runs.start("p", heartbeat_ttl=5, resume=True).started
    assert not deps.runs.start("p", heartbeat_ttl=5, resume=True).started  # one resume only
