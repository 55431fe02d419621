"""Every spawn passes one check (bot.runs.quota): spawns per turn, runs waiting or running
per person and per thread, schedules per person (real Redis and RQ)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.agent.tools import execute_tool
from bot.config import Settings
from bot.deps import Deps
from bot.errors import SpawnRejected
from bot.runs.recurring import fire_due
from bot.runs.stop import stop_run
from bot.types import ThreadRef
from tests.integration.test_control_redis import THREAD, command, session_of

OTHER = ThreadRef(platform="slack", account="T1", chat="C1", thread="2.0")


def make_deps(redis_url: str, *, spawns: int = 16, **limits: Any) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        admins=["slack:UADMIN"],
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"max_spawns_per_turn": spawns},  # type: ignore[arg-type]
        schedules={"min_interval_seconds": 1, "who": "anyone"},  # type: ignore[arg-type]
        **({"limits": limits} if limits else {}),
    )
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url, runs_per_user=3, runs_per_session=5, schedules_per_user=2)
    yield d
    d.close()


def turn(deps: Deps, user: str = "U1", thread: ThreadRef = THREAD) -> ToolContext:
    """A model turn's context (its spawns counted in ``spawned``)."""
    return ToolContext(
        deps=deps,
        session_key=session_of(thread),
        thread=thread,
        requester=f"slack:{user}",
        agent_id="main",
    )


def runs(deps: Deps, thread: ThreadRef = THREAD) -> int:
    return len(deps.runs.session_runs(session_of(thread)))


def test_subagents_spawn_is_counted_like_a_models_spawn(redis_url: str) -> None:
    """Before: 40 commands from one person queued 40 runs with max_spawns_per_turn=2."""
    deps = make_deps(redis_url, spawns=2)
    try:
        answers = [command(deps, f"/subagents spawn task {n}", user="U7") for n in range(40)]
        assert sum(a.startswith("🚀 Started subagent") for a in answers) == 2
        refused = answers[2]
        assert refused.startswith("I couldn't start that subagent: at most 2 spawns per turn")
        assert "try again in" in refused
        assert runs(deps) == 2

        ctx = turn(deps, user="U8")  # a model's turn: the same limit, from the same place
        spawn(ctx, SpawnArgs(task="a"))
        spawn(ctx, SpawnArgs(task="b"))
        with pytest.raises(SpawnRejected, match="at most 2 spawns per turn"):
            spawn(ctx, SpawnArgs(task="c"))
    finally:
        deps.close()


def test_runs_per_person_are_bounded_and_an_ended_run_frees_its_place(deps: Deps) -> None:
    for n in range(3):  # three turns, one spawn each
        spawn(turn(deps), SpawnArgs(task=f"task {n}"))
    with pytest.raises(SpawnRejected, match="you already have 3 runs waiting or running"):
        spawn(turn(deps), SpawnArgs(task="one more"))
    answer = command(deps, "/subagents spawn one more", user="U1")
    assert answer.startswith("I couldn't start that subagent: you already have 3 runs")
    assert runs(deps) == 3

    first = deps.runs.session_runs(session_of(THREAD))[0]
    stop_run(deps, first.run_id, by="slack:U1")
    spawn(turn(deps), SpawnArgs(task="now there is room"))
    assert runs(deps) == 4


def test_runs_per_thread_are_bounded_for_everyone_in_it(deps: Deps) -> None:
    for user in ("U1", "U1", "U2", "U2", "U3"):
        spawn(turn(deps, user), SpawnArgs(task="work"))
    with pytest.raises(SpawnRejected, match="this thread already has 5 runs"):
        spawn(turn(deps, "U4"), SpawnArgs(task="work"))
    spawn(turn(deps, "U4", thread=OTHER), SpawnArgs(task="work elsewhere"))  # another thread


def test_admins_are_exempt_from_the_run_places(deps: Deps) -> None:
    for n in range(7):
        spawn(turn(deps, "UADMIN"), SpawnArgs(task=f"task {n}"))
    assert runs(deps) == 7


def test_concurrent_spawns_never_pass_the_limit(redis_url: str) -> None:
    """40 commands at once from 4 gateways' clients: exactly the person's 3 places."""
    gateways = [make_deps(redis_url, runs_per_user=3) for _ in range(4)]
    answers: list[str] = []
    lock = threading.Lock()

    def burst(d: Deps) -> None:
        for n in range(10):
            answer = command(d, f"/subagents spawn task {n}", user="U5")
            with lock:
                answers.append(answer)

    try:
        threads = [threading.Thread(target=burst, args=(d,)) for d in gateways]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(answers) == 40
        assert sum(a.startswith("🚀") for a in answers) == 3
        assert runs(gateways[0]) == 3
    finally:
        for d in gateways:
            d.close()


def test_schedules_per_person_are_bounded(deps: Deps) -> None:
    assert command(deps, "/subagents every 2h check a", user="U1").startswith("⏰ Schedule #")
    assert command(deps, "/subagents every 2h check b", user="U1").startswith("⏰ Schedule #")
    third = command(deps, "/subagents every 2h check c", user="U1")
    assert third.startswith("I can't make that schedule: you already have 2 schedules")
    assert len(deps.schedules.all()) == 2
    assert command(deps, "/subagents every 2h check d", user="U2").startswith(
        "⏰ Schedule #"
    )  # their own

    first = deps.schedules.all()[0]
    assert "Removed" in command(deps, f"/subagents unschedule {first.schedule_id}", user="U1")
    assert command(deps, "/subagents every 2h check c", user="U1").startswith("⏰ Schedule #")


def test_a_schedules_runs_count_against_the_same_run_places(deps: Deps) -> None:
    command(deps, "/subagents every 1m check the build", user="U1")
    for n in range(3):
        spawn(turn(deps), SpawnArgs(task=f"task {n}"))
    (schedule,) = deps.schedules.all()

    assert fire_due(deps, now=schedule.next_time + 1) == []  # U1 has no place left
    assert runs(deps) == 3
    notices = [
        m for m in deps.redis.xrange(deps.keys.outbox) if b"did not start a run" in m[1][b"data"]
    ]
    assert len(notices) == 1
    assert b"you already have 3 runs waiting or running" in notices[0][1][b"data"]


@pytest.mark.parametrize("text", ["/subagents unschedule 999", "/subagents unschedule abc"])
def test_unscheduling_an_unknown_id_frees_nothing(deps: Deps, text: str) -> None:
    command(deps, "/subagents every 2h check a", user="U1")
    command(deps, "/subagents every 2h check b", user="U1")
    assert command(deps, text, user="U1").startswith("No schedule")
    assert "you already have 2 schedules" in command(deps, "/subagents every 2h c", user="U1")


def test_the_model_gets_the_refusal_as_its_tool_error(deps: Deps) -> None:
    tools = {t.name: t for t in SESSION_TOOLS_LIST}
    answers = [
        execute_tool(
            tools,
            name="sessions_spawn",
            arguments=json.dumps({"task": f"t{n}"}),
            ctx=turn(deps),
            max_chars=9_999,
        )
        for n in range(4)
    ]
    assert all(json.loads(a)["status"] == "accepted" for a in answers[:3])
    assert answers[3] == (
        "error: you already have 3 runs waiting or running (FANBOT_LIMITS__RUNS_PER_USER); "
        "wait for one to end or stop one"
    )
