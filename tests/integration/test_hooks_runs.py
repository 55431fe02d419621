"""Hooks at a run's end and at fan-in (docs/hooks.md), on real Redis."""

from __future__ import annotations

from typing import Any

from bot.deps import Deps
from bot.hooks import Event, RunEnd
from bot.hooks.chain import Hooks, Who
from bot.runs.execute import execute_run
from bot.runs.finalize import finalize_run
from bot.runs.join import continuation_prompt
from bot.steps import LoopControl, LoopResult, Meter
from bot.types import RunRecord, RunStatus
from tests.integration.test_finalize import deps_for, make_run
from tests.integration.test_join import joined_runs, opened

HERE = "tests.integration.test_hooks_runs"
ended: list[RunEnd] = []


def sign(event: Event) -> None:
    if isinstance(event, RunEnd):
        ended.append(event)
        event.result = f"{event.result} (checked)"


def refuse(event: Event) -> None:
    if isinstance(event, RunEnd):
        raise PermissionError("not today")


def answers(text: str) -> Any:
    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        return LoopResult(text=text, complete=True)

    return body


def with_hooks(redis_url: str, *paths: str) -> Deps:
    return deps_for(redis_url, agents={"main": {"middleware": [f"{HERE}:{p}" for p in paths]}})


def test_a_run_end_hook_sees_the_end_and_changes_the_announced_result(redis_url: str) -> None:
    deps = with_hooks(redis_url, "sign")
    make_run(deps)
    ended.clear()
    assert execute_run(deps, "r1", answers("the answer")) == "success"
    [event] = ended
    assert (event.run_id, event.status, event.type_name) == ("r1", "success", "general-purpose")
    record = deps.runs.get("r1")
    assert record is not None and record.result == "the answer (checked)"


def test_a_raising_run_end_hook_fails_the_run_naming_it(redis_url: str) -> None:
    deps = with_hooks(redis_url, "refuse")
    make_run(deps)
    assert execute_run(deps, "r1", answers("the answer")) == "error"
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.ERROR
    assert f"hook {HERE}:refuse failed: PermissionError: not today" in record.notes
    assert record.result == "the answer"


def test_fan_in_hooks_shape_the_continuation_prompt(redis_url: str) -> None:
    deps = deps_for(redis_url)
    plan = opened(deps)
    runs = joined_runs(deps, plan, 2)
    finalize_run(deps, runs[0], status=RunStatus.SUCCESS, result="alpha " * 50)
    finalize_run(deps, runs[1], status=RunStatus.SUCCESS, result="beta result")
    join = deps.joins.get(plan.join_id)
    assert join is not None
    hooks = Hooks(paths=("tests.unit.test_hooks:keep_first",), who=Who(session_key="s"))
    prompt = continuation_prompt(deps, join, [], hooks=hooks)
    assert "All 1 subagent run(s)" in prompt and "short" in prompt
    assert "alpha" not in prompt and "beta result" not in prompt
    assert deps.runs.get(runs[0]).result.startswith("alpha")  # type: ignore[union-attr]
