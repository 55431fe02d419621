"""The main agent's state through a real fan-in in Redis: waiting for its subagents while
they run, thinking again once the last one ended and the continuation is queued."""

from __future__ import annotations

from adapters.console.convert import live_lines
from bot.console.app import live_view
from bot.console.live_runs import in_flight
from bot.runs.finalize import finalize_run
from bot.runs.join import seal_join
from bot.runs.turn_state import THINKING, TurnState, turn_state
from bot.types import RunStatus
from tests.integration.test_finalize import deps_for
from tests.integration.test_join import SESSION, joined_runs, opened


def shown(deps: object, now: float = 0.0) -> list[str]:
    snapshot = in_flight(deps, [SESSION])  # type: ignore[arg-type]
    view = live_view(snapshot, thread_of={SESSION: "t"}, status_ids={})
    turns = [line for line in live_lines(
        view, now=now, status_texts={}, thinking_since={}, show_thread=False
    ) if line.startswith("…")]  # fmt: skip
    return turns


def test_waiting_for_subagents_then_thinking_again(redis_url: str) -> None:
    deps = deps_for(redis_url)
    assert turn_state(deps, SESSION) is None
    assert shown(deps) == []
    plan = opened(deps)
    runs = joined_runs(deps, plan, 3)
    seal_join(deps, plan.join_id)  # the turn that spawned them ended
    assert turn_state(deps, SESSION) == TurnState(waiting_for=tuple(runs))
    assert shown(deps) == ["… waiting for 3 subagents (#1, #2, #3) · 0s"]
    finalize_run(deps, runs[1], status=RunStatus.SUCCESS, result="b")
    assert shown(deps) == ["… waiting for 2 subagents (#1, #3) · 0s"]
    finalize_run(deps, runs[0], status=RunStatus.ERROR, notes="boom")
    assert shown(deps) == ["… waiting for subagent #3 · 0s"]
    finalize_run(deps, runs[2], status=RunStatus.SUCCESS, result="c")
    # The join fired and the continuation turn is queued: the model is next.
    assert turn_state(deps, SESSION) == THINKING
    assert shown(deps) == ["… fanbot is thinking · 0s"]
    deps.close()
