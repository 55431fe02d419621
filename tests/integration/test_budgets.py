"""Budgets in Redis: all-or-nothing reservations, settling, expiry of dead holds, and the
guarantee: however many processes share a limit, spend passes it by at most one call's
reservation."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from typing import Any

import pytest
import redis

from bot.errors import BudgetExceeded, SpawnRejected
from bot.keys import Keys
from bot.runs.budget import (
    BudgetGuard,
    SpawnBudget,
    daily_scopes,
    over_daily,
    run_scopes,
    spawn_limits,
    utc_day,
)
from bot.runs.type_registry import subagent_types
from bot.store.budgets import Budgets, Reservation, SpendScope
from bot.types import Usage
from tests.integration.test_finalize import deps_for, make_run

SESSION = "agent:main:console:c:thread:t"
RESERVE = 1_000
"""One call's reservation in the concurrency tests (its real use: half of it up to all)."""
LIMIT = 20_500


def budgets(url: str) -> Budgets:
    return Budgets(redis=redis.Redis.from_url(url), keys=Keys(), ttl_seconds=3600)


def test_a_reservation_is_all_or_nothing_and_names_the_scope_that_refused(redis_url: str) -> None:
    store = budgets(redis_url)
    run = SpendScope(kind="run", ident="r1", max_tokens=10_000)
    tree = SpendScope(kind="tree", ident="r1", max_usd=0.01)
    store.settle(store.reserve([tree], tokens=0, usd=0.01, hold_seconds=60), tokens=5, usd=0.01)
    refused = store.reserve([run, tree], tokens=100, usd=0.001, hold_seconds=60)
    assert not refused.ok and refused.refused == tree and refused.unit == "usd"
    assert not refused.held_only and refused.refused_spend.usd == pytest.approx(0.01)
    keys = store.redis.hkeys(store.key(run))
    assert not [k for k in keys if k.startswith(b"h:")]  # nothing held in the run either

    held = store.reserve([run], tokens=10_000, usd=0, hold_seconds=60)
    assert held.ok
    other = store.reserve([run], tokens=1, usd=0, hold_seconds=60)
    assert not other.ok and other.held_only  # only the call in flight stands in the way
    spent = store.settle(held, tokens=1_200, usd=0.0)
    assert spent[0].tokens == 1_200
    assert store.spent(run).tokens == 1_200


def test_a_dead_process_hold_expires(redis_url: str) -> None:
    store = budgets(redis_url)
    scope = SpendScope(kind="tree", ident="t", max_tokens=100)
    assert store.reserve([scope], tokens=500, usd=0, hold_seconds=0.2).ok  # never settled
    assert not store.reserve([scope], tokens=1, usd=0, hold_seconds=60).ok
    time.sleep(0.3)
    assert store.reserve([scope], tokens=1, usd=0, hold_seconds=60).ok


def test_daily_spend_is_listed_per_day(redis_url: str) -> None:
    store = budgets(redis_url)
    day = utc_day(time.time())
    scopes = [
        SpendScope(kind="thread", ident=SESSION, day=day),
        SpendScope(kind="user", ident="u", day=day),
    ]
    store.settle(store.reserve(scopes, tokens=10, usd=0, hold_seconds=60), tokens=42, usd=0.5)
    rows = store.day_usage(day)
    assert [(k, i, s.tokens, s.usd) for k, i, s in rows] == [
        ("thread", SESSION, 42, 0.5),
        ("user", "u", 42, 0.5),
    ]


def _spend_until_refused(url: str, seed: int, out: Any) -> None:
    """One of eight 'runs' sharing a tree limit: call after call until the tree refuses."""
    store = budgets(url)
    rng = random.Random(seed)
    scopes = [
        SpendScope(kind="run", ident=f"r{seed}"),
        SpendScope(kind="tree", ident="root", max_tokens=LIMIT),
    ]
    calls = 0
    while True:
        held = store.reserve(scopes, tokens=RESERVE, usd=0, hold_seconds=60)
        if not held.ok:
            if held.held_only:
                time.sleep(0.001)
                continue
            break
        time.sleep(rng.random() * 0.004)  # the model call
        store.settle(held, tokens=rng.randint(RESERVE // 2, RESERVE), usd=0)
        calls += 1
    out.put(calls) if hasattr(out, "put") else out.append(calls)


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_eight_parallel_runs_overspend_a_shared_tree_by_less_than_one_reservation(
    redis_url: str, how: str
) -> None:
    worst = 0
    for trial in range(10):
        redis.Redis.from_url(redis_url).delete(Keys().budget("tree", "root"))
        if how == "threads":
            done: list[int] = []
            workers: list[Any] = [
                threading.Thread(target=_spend_until_refused, args=(redis_url, i, done))
                for i in range(8)
            ]
        else:
            queue: Any = multiprocessing.get_context("fork").Queue()
            workers = [
                multiprocessing.get_context("fork").Process(
                    target=_spend_until_refused, args=(redis_url, i + 10 * trial, queue)
                )
                for i in range(8)
            ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(30)
        spent = budgets(redis_url).spent(SpendScope(kind="tree", ident="root")).tokens
        worst = max(worst, spent - LIMIT)
        assert LIMIT <= spent < LIMIT + RESERVE
    print(
        f"\nworst overspend of a {LIMIT}-token tree shared by 8 {how}: {worst} tokens "
        f"(one reservation: {RESERVE})"
    )
    assert worst < RESERVE


def test_the_guard_warns_once_past_the_fraction_and_stops_at_the_limit(redis_url: str) -> None:
    deps = deps_for(redis_url, budgets={"run_tokens": 5_000})
    record = make_run(deps, max_tokens=4_500)
    guard = BudgetGuard(deps=deps, scopes_for=lambda day: run_scopes(deps.settings, record, day))
    warnings = []
    for _ in range(5):
        warnings.append(guard.before_call(model="m", messages=[{"content": "x"}], tools=[]))
        guard.after_call(model="m", usage=Usage(prompt_tokens=800, completion_tokens=200))
    assert warnings[:4] == [None] * 4
    assert warnings[4] == "budget: 88 % of the run's 4.5k tokens used; finish up"
    with pytest.raises(BudgetExceeded) as exc:
        guard.before_call(model="m", messages=[], tools=[])
    assert str(exc.value) == "budget: the run's limit of 4.5k tokens is used up (5k tokens spent)"
    assert exc.value.kind == "run"
    deps.close()


def test_without_limits_a_call_holds_nothing_and_its_spend_is_still_counted(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    record = make_run(deps)
    day = utc_day(time.time())
    scopes = run_scopes(deps.settings, record, day)
    assert scopes and not any(scope.limited for scope in scopes)
    guard = BudgetGuard(deps=deps, scopes_for=lambda day: scopes)

    def no_reservation(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("reserved with no limit to enforce")

    deps.budgets.reserve = no_reservation  # type: ignore[method-assign]
    for _ in range(2):
        assert guard.before_call(model="m", messages=[{"content": "x"}], tools=[]) is None
        guard.after_call(model="m", usage=Usage(prompt_tokens=300, completion_tokens=100))
    assert all(deps.budgets.spent(scope).tokens == 800 for scope in scopes)
    assert ("user", record.requester, deps.budgets.spent(scopes[-1])) in deps.budgets.day_usage(day)
    deps.close()


def test_a_failed_call_releases_its_hold(redis_url: str) -> None:
    deps = deps_for(redis_url, budgets={"tree_tokens": 100})
    record = make_run(deps)
    guard = BudgetGuard(
        deps=deps, scopes_for=lambda day: run_scopes(deps.settings, record, day), wait=0.5
    )
    guard.before_call(model="m", messages=[], tools=[])
    guard.after_call(model="m", usage=None)
    guard.before_call(model="m", messages=[], tools=[])  # not blocked by a stale hold
    guard.after_call(model="m", usage=Usage(prompt_tokens=100))
    with pytest.raises(BudgetExceeded, match="the run tree's limit of 100 tokens"):
        guard.before_call(model="m", messages=[], tools=[])
    deps.close()


def test_over_daily_and_spawn_refusal(redis_url: str) -> None:
    deps = deps_for(
        redis_url,
        budgets={"thread_daily_tokens": 1_000, "user_daily_usd": 0.5},
        prices={"m": {"input": 1.0, "output": 1.0}},
    )
    day = utc_day(time.time())
    scopes = daily_scopes(deps.settings, session_key=SESSION, user="console:alice", day=day)
    assert over_daily(deps, session_key=SESSION, user="console:alice") is None
    held = deps.budgets.reserve(scopes, tokens=10, usd=0, hold_seconds=60)
    deps.budgets.settle(held, tokens=1_200, usd=0.0012)
    text = over_daily(deps, session_key=SESSION, user="console:alice")
    assert (
        text == "This thread has used its daily budget (1.2k of 1k tokens); it resets at 00:00 UTC."
    )
    sub_type = subagent_types(deps.settings)["general-purpose"]
    ask = SpawnBudget(session_key=SESSION, requester="console:alice")
    with pytest.raises(SpawnRejected, match="it resets at 00:00 UTC; no subagent was started"):
        spawn_limits(deps, sub_type, ask)
    other = SpawnBudget(session_key=SESSION + "2", requester="console:bob", tokens=300)
    assert spawn_limits(deps, sub_type, other).tokens == 300
    held = deps.budgets.reserve(scopes[1:], tokens=10, usd=0, hold_seconds=60)
    deps.budgets.settle(held, tokens=10, usd=0.6)
    assert over_daily(deps, session_key="elsewhere", user="console:alice") == (
        "You have used your daily budget ($0.60 of $0.50); it resets at 00:00 UTC."
    )
    deps.close()


def test_a_child_is_clamped_to_what_its_parent_and_tree_have_left(redis_url: str) -> None:
    deps = deps_for(redis_url, budgets={"tree_tokens": 10_000})
    parent = make_run(deps, "p1", max_tokens=6_000, root_run_id="p1")
    held = deps.budgets.reserve(
        run_scopes(deps.settings, parent, utc_day(time.time())), tokens=1, usd=0, hold_seconds=60
    )
    deps.budgets.settle(held, tokens=2_500, usd=0)
    sub_type = subagent_types(deps.settings)["general-purpose"]
    ask = SpawnBudget(
        session_key=SESSION, requester="console:alice", parent_run_id="p1", root_run_id="p1"
    )
    assert spawn_limits(deps, sub_type, ask).tokens == 3_500  # the parent's 6k less 2.5k
    sibling = deps.budgets.reserve(
        [SpendScope(kind="tree", ident="p1")], tokens=1, usd=0, hold_seconds=60
    )
    deps.budgets.settle(sibling, tokens=5_000, usd=0)
    assert spawn_limits(deps, sub_type, ask).tokens == 2_500  # the tree's 10k less 7.5k
    deps.budgets.settle(sibling, tokens=2_500, usd=0)
    with pytest.raises(SpawnRejected, match="used up"):
        spawn_limits(deps, sub_type, ask)
    deps.close()


def test_fanbot_subagents_usage_and_info_show_the_spend(redis_url: str) -> None:
    from typer.testing import CliRunner

    from bot.cli import app

    deps = deps_for(redis_url, budgets={"tree_tokens": 10_000})
    record = make_run(deps, "r1abcdef", max_tokens=5_000)
    held = deps.budgets.reserve(
        run_scopes(deps.settings, record, utc_day(time.time())), tokens=1, usd=0, hold_seconds=60
    )
    deps.budgets.settle(held, tokens=3_100, usd=0.0012)
    env = {
        "FANBOT_REDIS_URL": redis_url,
        "FANBOT_CONFIG": os.devnull,
        "FANBOT_BUDGETS__THREAD_DAILY_TOKENS": "50000",
        "FANBOT_BUDGETS__TREE_TOKENS": "10000",
    }
    usage = CliRunner().invoke(app, ["subagents", "usage"], env=env)
    assert usage.exit_code == 0, usage.output
    assert usage.output.splitlines() == [
        f"{utc_day(time.time())}  total 3.1k tokens · $0.0012",
        f"  thread 3.1k of 50k tokens · $0.0012  {SESSION}",
        "  user   3.1k tokens · $0.0012  console:alice",
    ]
    info = CliRunner().invoke(app, ["subagents", "info", "r1abcdef"], env=env)
    assert info.exit_code == 0, info.output
    assert "• Budget: run 3.1k of 5k tokens · $0.0012 · tree 3.1k of 10k tokens · $0.0012" in (
        info.output
    )
    deps.close()


def test_sessions_spawn_refuses_with_a_tool_error_once_the_thread_spent_its_day(
    redis_url: str,
) -> None:
    from bot.agent.context import ToolContext
    from bot.agent.session_tools import SESSION_TOOLS_LIST
    from bot.agent.tools import execute_tool
    from bot.types import ThreadRef

    deps = deps_for(redis_url, budgets={"thread_daily_tokens": 1_000})
    ctx = ToolContext(
        deps=deps,
        session_key=SESSION,
        thread=ThreadRef(platform="console", account="a", chat="c", thread="t"),
        requester="console:alice",
        agent_id="main",
    )
    tools = {t.name: t for t in SESSION_TOOLS_LIST}

    def spawn() -> str:
        return execute_tool(
            tools,
            name="sessions_spawn",
            arguments='{"task": "work", "maxTokens": 300, "join": false}',
            ctx=ctx,
            max_chars=2_000,
        )

    assert '"status": "accepted"' in spawn()
    [run] = deps.runs.session_runs(SESSION)
    assert run.max_tokens == 300
    scopes = daily_scopes(deps.settings, session_key=SESSION, user="u", day=utc_day(time.time()))
    deps.budgets.settle(
        deps.budgets.reserve(scopes, tokens=1, usd=0, hold_seconds=60), tokens=1_000, usd=0
    )
    assert spawn() == (
        "error: This thread has used its daily budget (1k of 1k tokens); it resets at "
        "00:00 UTC; no subagent was started"
    )
    deps.close()


def test_a_counter_gets_its_expiry_and_its_day_entry_at_its_first_spend_only(
    redis_url: str,
) -> None:
    store = budgets(redis_url)
    day = utc_day(time.time())
    scopes = [
        SpendScope(kind="run", ident="r1"),
        SpendScope(kind="thread", ident=SESSION, day=day),
        SpendScope(kind="user", ident="u", day=day),
    ]
    unheld = store.settle(_unheld(scopes), tokens=10, usd=0.5)
    assert [s.tokens for s in unheld] == [10, 10, 10]
    for key in [*(store.key(s) for s in scopes), store.keys.budget_day(day)]:
        assert 0 < store.redis.ttl(key) <= store.ttl
    store.redis.config_resetstat()
    again = store.settle(_unheld(scopes), tokens=5, usd=0.25)
    assert [(s.tokens, s.usd) for s in again] == [(15, 0.75)] * 3
    calls = {
        k.removeprefix("cmdstat_"): v["calls"] for k, v in store.redis.info("commandstats").items()
    }
    assert "expire" not in calls and "sadd" not in calls and "hdel" not in calls
    rows = store.day_usage(day)
    assert [(k, i, s.tokens) for k, i, s in rows] == [("thread", SESSION, 15), ("user", "u", 15)]


def _unheld(scopes: list[SpendScope]) -> Reservation:
    return Reservation(hold_id="", scopes=tuple(scopes), ok=True)  # no limit: nothing held
