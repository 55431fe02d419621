"""Budget rules without Redis: which limit a run gets, what a person and a model are told."""

from __future__ import annotations

import pytest

from bot.config import BudgetSettings, SubagentType
from bot.gateway.status_cards import status_text
from bot.runs.budget import (
    DEFAULT_OUTPUT_ESTIMATE,
    Limits,
    clamp,
    crossed,
    estimate,
    exhausted_text,
    left,
    run_limits,
    spend_text,
    warning_text,
)
from bot.store.budgets import Spend, SpendScope
from bot.store.progress import ProgressEvent, decode
from bot.types import ThreadRef


@pytest.mark.parametrize(
    ("asked", "type_max", "configured", "expected"),
    [
        ((None, None), (None, None), (None, None), Limits()),
        ((5_000, None), (None, None), (None, None), Limits(tokens=5_000)),
        ((5_000, 1.0), (3_000, None), (None, 0.5), Limits(tokens=3_000, usd=0.5)),
        ((None, 0.1), (None, 0.2), (8_000, 0.3), Limits(tokens=8_000, usd=0.1)),
    ],
)
def test_a_runs_limit_is_the_least_of_spawn_type_and_configured(
    asked: tuple[int | None, float | None],
    type_max: tuple[int | None, float | None],
    configured: tuple[int | None, float | None],
    expected: Limits,
) -> None:
    sub_type = SubagentType(name="t", max_tokens=type_max[0], max_cost_usd=type_max[1])
    budgets = BudgetSettings(run_tokens=configured[0], run_usd=configured[1])
    assert run_limits(budgets, sub_type, tokens=asked[0], usd=asked[1]) == expected


def test_left_and_clamp() -> None:
    assert left(Limits(tokens=1_000, usd=1.0), Spend(tokens=1_200, usd=0.25)) == Limits(
        tokens=0, usd=0.75
    )
    assert left(Limits(), Spend(tokens=5)) == Limits()
    assert clamp(Limits(tokens=900), Limits(tokens=500), Limits(usd=0.1)) == Limits(
        tokens=500, usd=0.1
    )


def test_the_estimate_is_the_request_characters_plus_the_output_cap() -> None:
    guess = estimate([{"role": "user", "content": "x" * 300}], [], None)
    assert 100 <= guess.prompt_tokens <= 120
    assert guess.completion_tokens == DEFAULT_OUTPUT_ESTIMATE
    assert estimate([], [], 256).completion_tokens == 256


@pytest.mark.parametrize(
    ("scope", "spend", "unit", "person", "text"),
    [
        (
            SpendScope(kind="run", ident="r", max_tokens=10_000),
            Spend(tokens=10_400),
            "tokens",
            False,
            "budget: the run's limit of 10k tokens is used up (10.4k tokens spent)",
        ),
        (
            SpendScope(kind="tree", ident="r", max_usd=0.5),
            Spend(usd=0.52),
            "usd",
            False,
            "budget: the run tree's limit of $0.50 is used up ($0.52 spent)",
        ),
        (
            SpendScope(kind="thread", ident="s", day="d", max_tokens=50_000),
            Spend(tokens=51_200),
            "tokens",
            True,
            "This thread has used its daily budget (51.2k of 50k tokens); it resets at 00:00 UTC.",
        ),
        (
            SpendScope(kind="user", ident="u", day="d", max_usd=2.0),
            Spend(usd=2.01),
            "usd",
            True,
            "You have used your daily budget ($2.01 of $2.00); it resets at 00:00 UTC.",
        ),
        (
            SpendScope(kind="user", ident="u", day="d", max_usd=2.0),
            Spend(usd=2.01),
            "usd",
            False,
            "The requester has used their daily budget ($2.01 of $2.00); it resets at 00:00 UTC",
        ),
    ],
)
def test_what_a_spent_limit_says(
    scope: SpendScope, spend: Spend, unit: str, person: bool, text: str
) -> None:
    assert exhausted_text(scope, spend, unit, person=person) == text


def test_warnings_name_the_most_spent_limit_past_the_fraction() -> None:
    run = SpendScope(kind="run", ident="r", max_tokens=10_000)
    tree = SpendScope(kind="tree", ident="t", max_usd=1.0)
    found = crossed([run, tree], [Spend(tokens=8_000), Spend(usd=0.9)], 0.8)
    assert [(s.kind, u) for _, s, u in found] == [("tree", "usd"), ("run", "tokens")]
    assert crossed([run], [Spend(tokens=7_999)], 0.8) == []
    assert warning_text(run, Spend(tokens=8_000), "tokens") == (
        "budget: 80 % of the run's 10k tokens used; finish up"
    )


def test_spend_text() -> None:
    assert spend_text(Spend(tokens=3_100, usd=0.0012), Limits(tokens=10_000)) == (
        "3.1k of 10k tokens · $0.0012"
    )
    assert spend_text(Spend(tokens=900), Limits()) == "900 tokens"
    assert spend_text(Spend(tokens=900, usd=0.2), Limits(usd=0.5)) == "900 tokens · $0.20 of $0.50"


def test_the_status_card_shows_the_budget_warning_while_the_run_works() -> None:
    note = "budget: 80 % of the run's 10k tokens used; finish up"
    assert status_text("#1 x", "step 3", final=False, note=note) == f"⏳ #1 x — step 3 · ⚠️ {note}"
    assert status_text("#1 x", "stopped", final=True, note=note) == "⏹️ #1 x — stopped"
    resumed = "↻ resumed after a worker was lost (1×)"  # a note with its own icon keeps it
    assert (
        status_text("#1 x", "step 3", final=False, note=resumed) == f"⏳ #1 x — step 3 · {resumed}"
    )
    thread = ThreadRef(platform="console", account="a", chat="c")
    fields = {"run_id": "r", "thread": '{"platform": "console", "account": "a", "chat": "c"}'}
    assert decode({**fields, "note": note}) == ProgressEvent(
        run_id="r", thread=thread, text="", note=note
    )


def test_subagents_info_shows_the_run_and_tree_spend_against_their_limits() -> None:
    from bot.commands.answers import render_info
    from bot.runs.budget import RunSpend
    from bot.types import RunRecord

    record = RunRecord(
        run_id="r",
        seq=1,
        session_key="s",
        child_session_key="c",
        session_id="i",
        thread=ThreadRef(platform="console", account="a", chat="c"),
        requester="console:alice",
        agent_id="main",
        subagent_type="general-purpose",
        task="t",
        model="m",
        max_tokens=10_000,
    )
    spend = RunSpend(
        run=Spend(tokens=8_200, usd=0.004),
        tree=Spend(tokens=12_000, usd=0.006),
        run_limits=Limits(tokens=10_000),
        tree_limits=Limits(usd=0.5),
    )
    text = render_info(record, now=0, transcript_ref="t", archive_at=None, spend=spend)
    assert "• Budget: run 8.2k of 10k tokens · $0.0040 · tree 12k tokens · $0.0060 of $0.50" in (
        text.splitlines()
    )
    assert "Budget" not in render_info(record, now=0, transcript_ref="t", archive_at=None)
