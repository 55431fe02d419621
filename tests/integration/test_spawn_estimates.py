"""Cost known before spending, against real Redis: finished runs leave samples in the
finalize script, a spawn shows the estimate they give, and a spawn whose p90 cost is above
``FANBOT_BUDGETS__APPROVE_ABOVE_USD`` waits for a person: it starts only once approved,
and a denial or no answer ends it without running, saying why."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.agent.subagent import SubagentBody
from bot.config import Settings
from bot.deps import Deps
from bot.runs.approval_gate import DecisionRequest, decide, expire_due
from bot.runs.execute import execute_run
from bot.runs.finalize import finalize_run
from bot.runs.stop import stop_run
from bot.store.approvals import ApprovalKind, ApprovalState
from bot.store.estimates import SAMPLE_CAP, TRIM_SLACK, Sample
from bot.testing.function_model import FunctionModel
from bot.testing.scripted import ScriptedModel, Text
from bot.types import RunRecord, RunStatus, Usage
from tests.integration.test_control_redis import THREAD, command, session_of
from tests.integration.test_finalize import make_run
from workers.maintenance import reap

PRICES = {"m": {"input": 10.0, "output": 10.0}}
"""$10 per million tokens: 1000 tokens cost $0.01."""
PAST = (2000, 9000, 4000)
"""Tokens of the finished runs behind the estimate: p50 4000 ($0.04), p90 9000 ($0.09)."""


def make_deps(redis_url: str, **budgets: Any) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        admins=["slack:UADMIN"],
        openai={"models": ["m"], "model": "m", "base_url": "http://127.0.0.1:9/v1"},  # type: ignore[arg-type]
        prices=PRICES,  # type: ignore[arg-type]
        budgets=budgets,  # type: ignore[arg-type]
    )
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url)
    yield d
    d.close()


@pytest.fixture
def gated(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url, approve_above_usd=0.05)
    finish(d, *PAST)
    yield d
    d.close()


def finish(deps: Deps, *spent: int, subagent_type: str = "explore", first: int = 0) -> None:
    """Runs of ``subagent_type`` on ``m`` that started, spent ``spent`` tokens and ended."""
    for i, tokens in enumerate(spent, first):
        run_id = f"past-{subagent_type}-{i}"
        make_run(deps, run_id, subagent_type=subagent_type, model="m", started_at=time.time())
        usage = Usage(prompt_tokens=tokens // 2, completion_tokens=tokens - tokens // 2)
        assert finalize_run(deps, run_id, status=RunStatus.SUCCESS, usage=usage)


def outbox(deps: Deps) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)]


def only_run(deps: Deps) -> RunRecord:
    (run,) = deps.runs.session_runs(session_of(THREAD))
    return run


def test_each_finished_run_leaves_one_sample_of_its_type_and_model(deps: Deps) -> None:
    finish(deps, *PAST)
    assert deps.estimates.samples("explore", "m") == [
        Sample(tokens=4000, cost_usd=pytest.approx(0.04)),  # newest first
        Sample(tokens=9000, cost_usd=pytest.approx(0.09)),
        Sample(tokens=2000, cost_usd=pytest.approx(0.02)),
    ]
    # ending it again changes nothing: the finalize script's decision comes first
    assert not finalize_run(
        deps, "past-explore-0", status=RunStatus.ERROR, usage=Usage(prompt_tokens=1)
    )
    make_run(deps, "never-started", subagent_type="explore", model="m")
    assert finalize_run(deps, "never-started", status=RunStatus.STOPPED)
    assert len(deps.estimates.samples("explore", "m")) == 3
    assert deps.estimates.samples("general-purpose", "m") == []
    ttl = deps.redis.ttl(deps.keys.estimate_samples("explore", "m"))
    assert 0 < ttl <= 30 * 86_400


def test_the_samples_are_capped(deps: Deps) -> None:
    finish(deps, *range(1000, 1000 + SAMPLE_CAP + TRIM_SLACK + 1), subagent_type="plan")
    kept = deps.estimates.samples("plan", "m")
    assert len(kept) == SAMPLE_CAP == deps.redis.llen(deps.keys.estimate_samples("plan", "m"))
    assert kept[0].tokens == 1000 + SAMPLE_CAP + TRIM_SLACK  # the newest stay


def test_a_spawn_from_chat_shows_its_estimate_and_keeps_it_on_the_run(deps: Deps) -> None:
    finish(deps, *PAST)
    answer = command(deps, "/subagents spawn explore map the repo", user="U7")
    assert answer == "🚀 Started subagent #1 (explore): map the repo\n💰 est. ~$0.04 (p90 $0.09)"
    run = only_run(deps)
    assert run.estimate and deps.jobs.exists(run.job_id)
    first = command(deps, "/subagents spawn plan sketch it", user="U7")
    assert first == "🚀 Started subagent #2 (plan): sketch it"  # no plan run has ended yet


def test_the_models_spawn_tool_gets_the_estimate(deps: Deps) -> None:
    finish(deps, *PAST)
    ctx = ToolContext(
        deps=deps,
        session_key=session_of(THREAD),
        thread=THREAD,
        requester="slack:U1",
        agent_id="main",
    )
    answer = spawn(ctx, SpawnArgs(task="map the repo", subagent_type="explore"))
    assert answer["status"] == "accepted"
    assert answer["estimate"] == {
        "text": "est. ~$0.04 (p90 $0.09)",
        "basedOnRuns": 3,
        "tokensP50": 4000,
        "tokensP90": 9000,
        "costUsdP50": 0.04,
        "costUsdP90": 0.09,
    }


def test_below_the_limit_a_spawn_starts_at_once(redis_url: str) -> None:
    deps = make_deps(redis_url, approve_above_usd=0.10)
    finish(deps, *PAST)
    answer = command(deps, "/subagents spawn explore map the repo", user="U7")
    run = only_run(deps)
    deps.close()
    assert answer.startswith("🚀 Started subagent #1")
    assert not run.approval_id and run.parked_at is None


def held_spawn(deps: Deps) -> tuple[RunRecord, str]:
    answer = command(deps, "/subagents spawn explore map the repo", user="U7")
    assert answer == (
        "🔐 Subagent #1 (explore) waits for approval to start (estimate above the limit): "
        "map the repo\n💰 est. ~$0.04 (p90 $0.09)"
    )
    run = only_run(deps)
    assert run.status is RunStatus.QUEUED and run.parked_at is not None and run.approval_id
    assert not deps.jobs.exists(run.job_id)  # no job, no slot: nothing can start it
    assert "waiting for approval" in command(deps, "/subagents list")
    return run, run.approval_id


def test_a_spawn_above_the_limit_is_held_and_starts_only_once_approved(gated: Deps) -> None:
    deps = gated
    run, approval_id = held_spawn(deps)
    approval = deps.approvals.get(approval_id)
    assert approval is not None and approval.kind is ApprovalKind.SPAWN
    [request] = [m for m in outbox(deps) if m["idempotency_key"] == f"approval:{approval_id}"]
    estimate = "est. ~$0.04 (p90 $0.09) from 3 recent runs, above the $0.05 limit."
    assert f"waits for approval to start: {estimate}" in request["text"]
    actions = [a["id"] for a in request["actions"]]
    assert actions == [f"!approve {approval_id}", f"!deny {approval_id}"]
    assert reap(deps, now=time.time() + 3000) == []  # a held spawn is not a lost job
    still = deps.runs.get(run.run_id)
    assert still is not None and still.status is RunStatus.QUEUED

    def ask(user: str, arguments: str | None = None) -> str:
        request = DecisionRequest(approval_id=approval_id, approve=True, arguments=arguments)
        return decide(deps, request, platform="slack", user_id=user).text

    assert ask("U9").startswith("Sorry, only the person who started this run")
    assert ask("U7", '{"task": "other"}') == "Not decided: a spawn is approved as it was asked."
    assert not deps.jobs.exists(run.job_id)
    assert ask("U7") == "✅ Subagent #1 map the repo (explore): start approved by @U7."
    started = deps.runs.get(run.run_id)
    assert started is not None and started.parked_at is None and deps.jobs.exists(run.job_id)
    assert run.run_id in deps.jobs.fair.holders()  # in line, and given its slot

    model = FunctionModel(ScriptedModel().on(lambda r: True, lambda r: Text("the map")))
    body = SubagentBody(deps=deps, model=model)
    assert asyncio.run(asyncio.to_thread(execute_run, deps, run.run_id, body)) == "success"
    done = deps.runs.get(run.run_id)
    assert done is not None and done.result == "the map"


@pytest.mark.parametrize("how", ["deny", "expire"])
def test_a_held_spawn_denied_or_unanswered_ends_without_running(gated: Deps, how: str) -> None:
    deps = gated
    run, approval_id = held_spawn(deps)
    if how == "deny":
        denial = DecisionRequest(approval_id=approval_id, approve=False)
        answer = decide(deps, denial, platform="slack", user_id="UADMIN")
        assert answer.text == (
            "❌ Subagent #1 map the repo (explore): start denied by @UADMIN; it did not run."
        )
        why = "its start was denied by @UADMIN"
    else:
        assert expire_due(deps, now=time.time() + 3601) == [approval_id]
        why = "nobody approved its start in time"
    ended = deps.runs.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.STOPPED and ended.started_at is None
    assert ended.result == (
        f"Not started: {why} (est. ~$0.04 (p90 $0.09) from 3 recent runs, above the $0.05 limit)."
    )
    assert not deps.jobs.exists(run.job_id)
    texts = [m["text"] for m in outbox(deps)]
    assert any(t.startswith("⏹️ Subagent #1") and f"Not started: {why}" in t for t in texts)
    # the requester's model reads why in its next turn
    history = deps.history.load(session_of(THREAD))
    assert f"Not started: {why}" in str(history[-1]["content"])
    state = deps.approvals.get(approval_id)
    assert state is not None and state.state is not ApprovalState.PENDING


def test_the_models_held_spawn_says_it_waits(gated: Deps) -> None:
    ctx = ToolContext(
        deps=gated,
        session_key=session_of(THREAD),
        thread=THREAD,
        requester="slack:U1",
        agent_id="main",
    )
    answer = spawn(ctx, SpawnArgs(task="map the repo", subagent_type="explore"))
    assert answer["status"] == "waiting_for_approval"
    assert "a person must approve its start" in str(answer["approval"])


def test_stopping_a_held_spawn_withdraws_its_request(gated: Deps) -> None:
    run, approval_id = held_spawn(gated)
    stop_run(gated, run.run_id, by="@U7")
    ended = gated.runs.get(run.run_id)
    assert ended is not None and ended.status is RunStatus.STOPPED
    edits = [m for m in outbox(gated) if m["idempotency_key"] == f"approval:{approval_id}:outcome"]
    assert [m["text"] for m in edits] == [
        "⏹️ Subagent #1 map the repo (explore): stopped before a decision."
    ]
    late = DecisionRequest(approval_id=approval_id, approve=True)
    assert decide(gated, late, platform="slack", user_id="U7").refused
    assert not gated.jobs.exists(run.job_id)
