"""Budgets through forked workers and the fake model: the warning at 80 % and the stop at
100 % for each limit kind, the daily refusal, and eight parallel runs sharing a limit."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis import Redis

from bot.keys import Keys
from bot.runs.budget import utc_day
from bot.store.budgets import Budgets, SpendScope
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from bot.types import RunStatus, Usage
from tests.e2e.conftest import stack_values

STEP = Usage(prompt_tokens=800, completion_tokens=200)
"""Each subagent call: 1000 tokens, $0.0012 at the prices below."""
PRICES = {"fake-model": {"input": 1.0, "output": 2.0}}
FREE = Usage()


def warned(req: ChatRequest) -> bool:
    return any(
        m.get("role") == "system" and str(m.get("content", "")).startswith("budget:")
        for m in req.messages
    )


def spending_model(
    spawn: dict[str, Any], runs: int = 1, delay: float = 0.6, main_usage: Usage = FREE
) -> ScriptedModel:
    """The main agent spawns ``runs`` runs (each of its calls uses ``main_usage``); each run calls a
    tool on every step, spending :data:`STEP` per call, until a limit stops it (each call
    takes ``delay`` seconds: longer than a status card's edit interval)."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.", usage=main_usage)
        calls = [Call("sessions_spawn", {**spawn, "label": f"L{i}"}) for i in range(runs)]
        return ToolCalls(calls, usage=main_usage)

    def subagent(req: ChatRequest) -> ToolCalls:
        steps = sum(1 for m in req.messages if m.get("role") == "tool")
        return ToolCalls(
            [Call("current_time", {})], content=f"progress {steps + 1}", usage=STEP, delay=delay
        )

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


CASES = [
    pytest.param(
        {"maxTokens": 4_500},
        {},
        "budget: 88 % of the run's 4.5k tokens used; finish up",
        "budget: the run's limit of 4.5k tokens is used up (5k tokens spent)",
        id="run-tokens",
    ),
    pytest.param(
        {},
        {"tree_usd": 0.0055},
        "budget: 87 % of the run tree's $0.0055 used; finish up",
        "budget: the run tree's limit of $0.0055 is used up ($0.0060 spent)",
        id="tree-usd",
    ),
    pytest.param(
        {},
        {"thread_daily_tokens": 4_500},
        "budget: 88 % of this thread's daily 4.5k tokens used; finish up",
        "This thread has used its daily budget (5k of 4.5k tokens); it resets at 00:00 UTC",
        id="thread-tokens",
    ),
    pytest.param(
        {},
        {"user_daily_usd": 0.0055},
        "budget: 87 % of the requester's daily $0.0055 used; finish up",
        "The requester has used their daily budget ($0.0060 of $0.0055); it resets at 00:00 UTC",
        id="user-usd",
    ),
]


@pytest.mark.parametrize(("spawn", "budgets", "warning", "note"), CASES)
async def test_a_run_is_warned_at_80_percent_and_stopped_at_its_limit(
    redis_url: str, spawn: dict[str, Any], budgets: dict[str, Any], warning: str, note: str
) -> None:
    model = spending_model({"task": "spend", **spawn})
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url, prices=PRICES, budgets=budgets)
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("spend some")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
        calls = [r.chat for r in fake.requests if is_subagent(r.chat)]
    assert len(calls) == 5  # 4000 spent: the fifth call is admitted, the sixth is not
    assert [warned(c) for c in calls] == [False, False, False, False, True]
    assert any(m.get("content") == warning for m in calls[4].messages)
    announce = channel.announces[0].text
    assert "Status: stopped" in announce
    assert "Result: progress 5" in announce
    assert f"Notes: {note}; stopped after 5 step(s)" in announce
    cards = [m.text for m in channel.sent if m.kind.value == "status"]
    cards += [e.text for e in channel.edits]
    assert any(f"⚠️ {warning}" in c for c in cards)


async def test_a_thread_over_its_daily_budget_is_told_without_a_model_call(
    redis_url: str,
) -> None:
    main_usage = Usage(prompt_tokens=50)  # the main agent's turns count too
    model = spending_model({"task": "spend"}, main_usage=main_usage)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        budgets = {"thread_daily_tokens": 4_500, "user_daily_tokens": 8_000}
        # Small output caps keep each call's held estimate small: the main agent's second
        # call must not wait behind the subagent's holds (it then loses the race to them).
        values = stack_values(
            redis_url,
            fake.base_url,
            prices=PRICES,
            budgets=budgets,
            openai={"max_output_tokens": 100},
        )
        channel = MemoryChannel()
        here, there = channel.thread("one"), channel.thread("two")
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("spend some", thread=here)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
            before = len(fake.requests)
            await channel.say("more please", thread=here)
            await stack.wait_for(lambda: len(channel.replies) == 2, timeout=20)
            assert len(fake.requests) == before
            await channel.say("spend here", thread=there)  # alice has 2.9k left today
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
            before = len(fake.requests)
            await channel.say("and again", thread=there)
            await stack.wait_for(lambda: len(channel.replies) == 4, timeout=20)
            assert len(fake.requests) == before
    assert channel.replies[1].text == (
        "This thread has used its daily budget (5.1k of 4.5k tokens); it resets at 00:00 UTC."
    )
    assert "The requester has used their daily budget (8.2k of 8k tokens)" in (
        channel.announces[1].text
    )
    assert channel.replies[3].text == (
        "You have used your daily budget (8.2k of 8k tokens); it resets at 00:00 UTC."
    )


async def test_eight_parallel_runs_sharing_a_daily_limit_overspend_it_by_less_than_a_call(
    redis_url: str,
) -> None:
    limit = 20_500
    model = spending_model({"task": "spend"}, runs=8)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            budgets={"thread_daily_tokens": limit},
            subagents={"max_concurrent": 8},
            openai={"max_output_tokens": 1_000},
        )
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=8) as stack:
            await channel.say("spend in parallel")
            await stack.wait_for(lambda: len(channel.announces) == 8, timeout=90)
        overlap = fake.max_overlap(lambda r: is_subagent(r.chat))
    usage = Budgets(redis=Redis.from_url(redis_url), keys=Keys(), ttl_seconds=60)
    [(_, _, spend)] = [row for row in usage.day_usage(utc_day(time.time())) if row[0] == "thread"]
    spent = spend.tokens
    print(f"\n8 parallel runs (max overlap {overlap}), thread limit {limit}: spent {spent}")
    assert overlap >= 4
    assert limit <= spent < limit + 1_000 + 1_000  # one call's reservation: its use ≤ 2k


LEAD = {
    "name": "lead",
    "description": "Splits a task.",
    "role": "orchestrator",
    "system_prompt": "LEAD. Split the task with sessions_spawn.",
}


def tree_model(children: int) -> ScriptedModel:
    """The main agent starts one lead (free); the lead spawns ``children`` leaves (free) and
    answers their fan-in; each leaf spends :data:`STEP` per call until the tree stops it."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("started", usage=FREE)
        return ToolCalls([Call("sessions_spawn", {"task": "lead", "subagent_type": "lead"})])

    def lead(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool" or "[fan-in]" in req.last_user_message:
            return Text("combined", usage=FREE)
        calls = [Call("sessions_spawn", {"task": f"leaf {i}"}) for i in range(children)]
        return ToolCalls(calls, usage=FREE)

    def leaf(req: ChatRequest) -> ToolCalls:
        return ToolCalls([Call("current_time", {})], content="working", usage=STEP, delay=0.3)

    return (
        ScriptedModel()
        .on(lambda r: "LEAD." in r.system_prompt, lead)
        .on(lambda r: "You are fanbot" in r.system_prompt, main)
        .on(lambda r: True, leaf)
    )


async def test_eight_children_sharing_a_tree_limit_overspend_it_by_less_than_a_call(
    redis_url: str,
) -> None:
    limit = 20_500
    async with FakeOpenAI(tree_model(8), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            budgets={"tree_tokens": limit},
            subagents={"max_spawn_depth": 2, "max_children_per_run": 8, "max_concurrent": 9},
            subagent_types=[LEAD],
            openai={"max_output_tokens": 1_000},
        )
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=8) as stack:
            await channel.say("split it")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=120)
        overlap = fake.max_overlap(
            lambda r: "LEAD." not in r.chat.system_prompt and is_subagent(r.chat)
        )
    runs = RunsRegistry(redis=Redis.from_url(redis_url), keys=Keys())
    [root] = [r for r in runs.all() if r.depth == 1]
    leaves = [r for r in runs.all() if r.depth == 2]
    store = Budgets(redis=Redis.from_url(redis_url), keys=Keys(), ttl_seconds=60)
    spent = store.spent(SpendScope(kind="tree", ident=root.run_id)).tokens
    print(f"\n8 children (max overlap {overlap}), tree limit {limit}: spent {spent}")
    assert len(leaves) == 8 and all(r.status is RunStatus.STOPPED for r in leaves)
    assert all("the run tree's limit of 20.5k tokens is used up" in r.notes for r in leaves)
    assert overlap >= 4
    assert limit <= spent < limit + 1_000 + 1_000  # one call's reservation: its use ≤ 2k
