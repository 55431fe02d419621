"""Spawn estimates without Redis: percentiles of recent runs, too few runs, the texts of the
acknowledgement, the status card and a held spawn's approval request."""

from __future__ import annotations

import json

import pytest

from bot.commands.spawn_command import started_text
from bot.gateway.status_cards import status_text
from bot.runs.estimate import (
    NO_ESTIMATE,
    Estimate,
    above,
    card_note,
    estimate,
    estimate_text,
    percentile,
    sample_of,
    tool_answer,
    usd,
)
from bot.runs.progress_lines import step_event
from bot.runs.spawn_approval import ended_note, hold_reason, outcome_text, request_text
from bot.steps import Meter
from bot.store.approvals import ApprovalKind, ApprovalRecord, ApprovalState, PendingCall
from bot.store.estimates import Sample
from bot.types import RunRecord, ThreadRef

THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")


def samples(*spent: tuple[int, float | None]) -> list[Sample]:
    return [Sample(tokens=t, cost_usd=c) for t, c in spent]


def test_percentiles_are_nearest_rank_values_some_run_really_spent() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 90) == 9.0
    assert percentile([7.0], 90) == 7.0
    assert percentile([1.0, 100.0, 2.0], 50) == 2.0  # the median, not a mean
    assert percentile([1.0, 100.0, 2.0], 90) == 100.0


def test_an_estimate_takes_p50_and_p90_of_tokens_and_cost() -> None:
    est = estimate(samples((2000, 0.02), (9000, 0.09), (4000, 0.04)))
    assert est == Estimate(runs=3, tokens_p50=4000, tokens_p90=9000, cost_p50=0.04, cost_p90=0.09)
    assert estimate_text(est) == "est. ~$0.04 (p90 $0.09)"
    assert Estimate.from_json(est.to_json()) == est


@pytest.mark.parametrize("runs", [0, 1, 2])
def test_too_few_runs_give_no_estimate(runs: int) -> None:
    est = estimate(samples(*[(1000, 0.01)] * runs))
    assert not est.known and est.runs == runs
    assert estimate_text(est) == NO_ESTIMATE == "no estimate yet"
    assert est.to_json() == ""
    assert not above(est, 0.0001)  # nothing invented, so nothing is held
    assert tool_answer(est) == {"text": "no estimate yet", "basedOnRuns": runs}


def test_without_enough_prices_the_estimate_is_in_tokens_only() -> None:
    est = estimate(samples((3100, None), (5200, None), (1000, 0.5), (4000, None)))
    assert est.cost_p90 is None and est.tokens_p50 == 3100 and est.tokens_p90 == 5200
    assert estimate_text(est) == "est. ~3.1k tokens (p90 5.2k)"
    assert not above(est, 0.01)


def test_above_compares_the_p90_cost_with_the_limit() -> None:
    est = estimate(samples((1, 0.01), (1, 0.02), (1, 0.09)))
    assert above(est, 0.05)
    assert not above(est, 0.09)  # at the limit is not above it
    assert not above(est, None)  # no limit set: never held


def test_usd_is_short() -> None:
    assert [usd(v) for v in (0.04, 0.0912, 1.2, 0.0012, 0.0)] == [
        "$0.04",
        "$0.09",
        "$1.20",
        "$0.0012",
        "$0.00",
    ]


def test_the_tool_answer_carries_the_numbers() -> None:
    est = estimate(samples((2000, 0.02), (9000, 0.09), (4000, 0.04)))
    assert tool_answer(est) == {
        "text": "est. ~$0.04 (p90 $0.09)",
        "basedOnRuns": 3,
        "tokensP50": 4000,
        "tokensP90": 9000,
        "costUsdP50": 0.04,
        "costUsdP90": 0.09,
    }


def record(**kw: object) -> RunRecord:
    fields: dict[str, object] = dict(
        run_id="r1",
        seq=3,
        session_key="agent:main:console:c:thread:t",
        child_session_key="agent:main:subagent:x",
        session_id="s1",
        thread=THREAD,
        requester="console:alice",
        agent_id="main",
        subagent_type="explore",
        task="map the repo",
        model="m",
    )
    fields.update(kw)
    return RunRecord(**fields)  # type: ignore[arg-type]


def test_only_a_run_that_started_and_spent_tokens_is_a_sample() -> None:
    spent = record(started_at=1.0, prompt_tokens=300, completion_tokens=200, cost_usd=0.003)
    assert sample_of(spent) == Sample(tokens=500, cost_usd=0.003)
    assert sample_of(record(started_at=None, prompt_tokens=300)) is None  # never started
    assert sample_of(record(started_at=1.0)) is None  # spent nothing


def test_the_acknowledgement_shows_the_estimate_or_says_there_is_none() -> None:
    est = estimate(samples((2000, 0.02), (9000, 0.09), (4000, 0.04)))
    assert started_text(3, "explore", "map the repo", estimate=estimate_text(est)) == (
        "🚀 Started subagent #3 (explore): map the repo\n💰 est. ~$0.04 (p90 $0.09)"
    )
    assert started_text(3, "explore", "map the repo", estimate=NO_ESTIMATE) == (
        "🚀 Started subagent #3 (explore): map the repo\n💰 no estimate yet"
    )
    held = started_text(3, "explore", "map it", estimate=estimate_text(est), held=True)
    assert held == (
        "🔐 Subagent #3 (explore) waits for approval to start (estimate above the limit): "
        "map it\n💰 est. ~$0.04 (p90 $0.09)"
    )


def test_the_status_card_shows_the_estimate_while_the_run_works() -> None:
    est = estimate(samples((2000, 0.02), (9000, 0.09), (4000, 0.04)))
    run = record(estimate=est.to_json())
    assert card_note(run) == "💰 est. ~$0.04 (p90 $0.09)"
    event = step_event(run, Meter(), "step 1")
    line = status_text("[explore] Subagent #3", event.text, final=False, note=event.note)
    assert line == "⏳ [explore] Subagent #3 — step 1 · 💰 est. ~$0.04 (p90 $0.09)"
    warned = Meter(note="80% of the run's budget used")  # a budget warning stands instead
    assert step_event(run, warned, "step 2").note == "80% of the run's budget used"
    assert step_event(record(), Meter(), "step 1").note == ""  # no estimate: nothing shown


def spawn_approval(state: ApprovalState = ApprovalState.PENDING, by: str = "") -> ApprovalRecord:
    est = estimate(samples((2000, 0.02), (9000, 0.09), (4000, 0.04)))
    args = {"task": "map the `whole` repo\nand more", "subagent_type": "explore", "model": "m"}
    return ApprovalRecord(
        approval_id="ab12cd34",
        run_id="r1",
        thread=THREAD,
        requester="console:alice",
        calls=(PendingCall(id="", name="sessions_spawn", arguments=json.dumps(args)),),
        label="#3 map the repo (explore)",
        kind=ApprovalKind.SPAWN,
        detail=hold_reason(est, 0.05),
        state=state,
        decided_by=by,
    )


def test_a_held_spawns_request_names_its_estimate_and_the_limit() -> None:
    text = request_text(spawn_approval(), timeout_s=3600)
    assert text == (
        "🔐 Subagent #3 map the repo (explore) waits for approval to start: "
        "est. ~$0.04 (p90 $0.09) from 3 recent runs, above the $0.05 limit.\n"
        "Task: map the 'whole' repo and more\n"
        "Approve or deny (id `ab12cd34`, no answer in 1 h means deny)."
    )


def test_a_held_spawns_outcomes_and_notes() -> None:
    approved = spawn_approval(ApprovalState.APPROVED, "console:ann")
    assert outcome_text(approved, by="@ann") == (
        "✅ Subagent #3 map the repo (explore): start approved by @ann."
    )
    denied = spawn_approval(ApprovalState.DENIED, "console:bob")
    assert outcome_text(denied, by="@bob") == (
        "❌ Subagent #3 map the repo (explore): start denied by @bob; it did not run."
    )
    assert ended_note(denied, by="@bob") == (
        "Not started: its start was denied by @bob (est. ~$0.04 (p90 $0.09) from 3 recent "
        "runs, above the $0.05 limit)."
    )
    expired = spawn_approval(ApprovalState.EXPIRED)
    assert outcome_text(expired, by="nobody") == (
        "⌛ Subagent #3 map the repo (explore): not started, no answer in time."
    )
    assert ended_note(expired, by="nobody").startswith("Not started: nobody approved its start")
