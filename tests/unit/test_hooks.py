"""Hooks (docs/hooks.md): finding them by dotted path, what each hook point passes and takes
back, a veto, a failure's text, and the tool loop calling them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest

from bot.agent.context import ToolContext
from bot.agent.loop import run_loop
from bot.agent.tools import Tool
from bot.config import load_settings
from bot.errors import ConfigError, HookFailed
from bot.hooks import (
    Event,
    FanInResult,
    ModelCall,
    ModelReply,
    RunEnd,
    ToolCall,
    ToolResult,
    Veto,
    chain,
)
from bot.hooks.chain import Hooks, Vetoed, Who, hooks_for
from bot.hooks.resolve import HookNotFound, check, paths_for, resolve
from bot.models.completion import Completion, ToolCallRequest
from bot.steps import Meter
from bot.testing import Call, ChatRequest, FunctionModel, Text, ToolCalls
from bot.types import ThreadRef

HERE = "tests.unit.test_hooks"
THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")
SECRET = "sk-live-0123456789abcdef"
WHO = Who(run_id="r1", session_key="s", agent_id="main", type_name="t", requester="slack:U1")
seen: list[Event] = []  # what record() was handed, cleared by each test that reads it


def record(event: Event) -> None:
    seen.append(event)


def redact(event: Event) -> None:
    if isinstance(event, ToolResult):
        event.result = event.result.replace(SECRET, "[redacted]")


def veto_double(event: Event) -> Veto | None:
    if isinstance(event, ToolCall) and event.tool == "double":
        return Veto("no doubling")
    return None


def raise_veto(event: Event) -> None:
    raise Veto("never")


def shout(event: Event) -> None:
    if isinstance(event, ModelCall):
        event.messages.append({"role": "system", "content": "SHOUT"})
    elif isinstance(event, ModelReply):
        event.text = event.text.upper()
    elif isinstance(event, ToolCall):
        event.arguments = '{"n": 5}'
    elif isinstance(event, RunEnd):
        event.result = f"{event.status}: {event.result}"


def boom(event: Event) -> None:
    raise ValueError("x" * 1000)


def returns_text(event: Event) -> str:
    return "changed"


def keep_first(event: Event) -> None:
    from bot.hooks import FanIn

    if isinstance(event, FanIn):
        event.results[0].result = "short"
        del event.results[1:]


NOT_CALLABLE = 42


def hooks(*names: str) -> Hooks:
    return Hooks(paths=tuple(f"{HERE}:{n}" for n in names), who=WHO)


def test_both_dotted_forms_name_the_same_callable() -> None:
    assert resolve(f"{HERE}:record") is record
    assert resolve(f"{HERE}.record") is record


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("tests.unit.no_such_module:f", "cannot import 'tests.unit.no_such_module'"),
        (f"{HERE}:missing", "has no attribute 'missing'"),
        (f"{HERE}:NOT_CALLABLE", "is a int, not a callable"),
    ],
)
def test_a_path_that_names_no_callable_says_why(path: str, why: str) -> None:
    with pytest.raises(HookNotFound, match=why):
        resolve(path)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("clean_env")
def test_start_up_names_the_setting_and_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    types = [{"name": "a", "middleware": [f"{HERE}:record", f"{HERE}:missing"]}]
    monkeypatch.setenv("FANBOT_SUBAGENT_TYPES", json.dumps(types))
    monkeypatch.setenv("FANBOT_AGENTS", json.dumps({"main": {"middleware": [f"{HERE}.record"]}}))
    settings = load_settings()
    with pytest.raises(ConfigError) as caught:
        check(settings)
    assert str(caught.value) == (
        f"FANBOT_SUBAGENT_TYPES[0].middleware[1] '{HERE}:missing': "
        f"'{HERE}' has no attribute 'missing'"
    )
    assert paths_for(settings, "main", "a") == [
        f"{HERE}.record",
        f"{HERE}:record",
        f"{HERE}:missing",
    ]
    assert paths_for(settings, "main", None) == [f"{HERE}.record"]


@pytest.mark.usefixtures("clean_env")
def test_an_agent_hook_that_cannot_import_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_AGENTS", json.dumps({"main": {"middleware": ["nosuch_x.mod:f"]}}))
    with pytest.raises(ConfigError, match=r"FANBOT_AGENTS__MAIN__MIDDLEWARE\[0\] 'nosuch_x.mod:f'"):
        check(load_settings())


def test_every_event_says_whose_work_it_is() -> None:
    seen.clear()
    hooks("record").after_tool(ToolCallRequest(id="c1", name="t", arguments="{}"), "ok")
    [event] = seen
    assert isinstance(event, ToolResult)
    assert (event.run_id, event.session_key, event.agent_id, event.type_name, event.requester) == (
        "r1", "s", "main", "t", "slack:U1",
    )  # fmt: skip


def test_each_hook_point_takes_back_what_may_change() -> None:
    h = hooks("shout")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    sent = h.before_model("m", messages, [])
    assert sent[-1]["content"] == "SHOUT" and messages == [{"role": "user", "content": "hi"}]
    assert h.after_model("m", Completion(content="hello")).content == "HELLO"
    call = h.before_tool(ToolCallRequest(id="c", name="double", arguments='{"n": 1}'))
    assert call.arguments == '{"n": 5}'
    assert h.run_end(status="success", result="done", notes="") == "success: done"


def test_a_veto_raised_or_returned_becomes_the_calls_error_text() -> None:
    call = ToolCallRequest(id="c", name="double", arguments="{}")
    with pytest.raises(Vetoed, match=f"^error: vetoed by {HERE}:veto_double: no doubling$"):
        hooks("veto_double").before_tool(call)
    with pytest.raises(Vetoed, match=r"vetoed by .*:raise_veto: never"):
        hooks("raise_veto").before_tool(call)


def test_a_veto_anywhere_else_fails_the_run() -> None:
    with pytest.raises(HookFailed, match=f"hook {HERE}:raise_veto failed: Veto: never"):
        hooks("raise_veto").after_model("m", Completion(content=""))


def test_a_raising_hook_fails_with_its_name_and_a_bounded_message() -> None:
    with pytest.raises(HookFailed) as caught:
        hooks("record", "boom").run_end(status="success", result="r", notes="")
    text = str(caught.value)
    assert text.startswith(f"hook {HERE}:boom failed: ValueError: xxx")
    assert len(text) < 400 and "\n" not in text


def test_a_hook_returning_a_value_is_a_mistake_said_plainly() -> None:
    with pytest.raises(HookFailed, match="returned a str; a hook changes the event"):
        hooks("returns_text").after_tool(ToolCallRequest(id="c", name="t", arguments=""), "x")


def test_fan_in_hooks_may_change_and_drop_results() -> None:
    results = [
        FanInResult(
            run_id=f"r{i}", number=i, label="l", type_name="t", status="success", result="long"
        )
        for i in (1, 2)
    ]
    kept = hooks("keep_first").fan_in(results)
    assert [(r.run_id, r.result) for r in kept] == [("r1", "short")]
    assert results[0].result == "long"  # the hooks got copies


def test_a_slow_hook_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chain, "SLOW_SECONDS", 0.0)
    lines: list[str] = []
    h = Hooks(paths=(f"{HERE}:record",), who=WHO, report=lines.append)
    h.run_end(status="success", result="", notes="")
    assert lines == [f"hook {HERE}:record took 0s at the run's end"]


def test_no_hooks_pass_everything_through_untouched() -> None:
    h = hooks_for(load_settings(), Who())
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    assert h.before_model("m", messages, []) is messages


# The tool loop with hooks: FunctionModel answers in-process.


def _double(ctx: ToolContext, args: dict[str, Any]) -> str:
    ran.append(args)
    return f"{2 * int(args['n'])} (key {SECRET})"


ran: list[dict[str, Any]] = []
DOUBLE = Tool(
    name="double",
    description="Twice n.",
    run=_double,
    schema_json={"type": "object", "properties": {"n": {"type": "integer"}}},
)


def _loop(h: Hooks) -> tuple[FunctionModel, list[dict[str, Any]]]:
    def answer(request: ChatRequest) -> Text | ToolCalls:
        if request.last_role == "tool":
            return Text(f"got {request.tool_results[-1].content}")
        return ToolCalls([Call("double", {"n": 21})])

    model = FunctionModel(answer)
    ctx = ToolContext(
        deps=cast(Any, None), session_key="s", thread=THREAD, requester="u", agent_id="main",
        hooks=h,
    )  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": "double 21"}]
    run_loop(
        model=model, model_name="m", messages=messages, tools=[DOUBLE], ctx=ctx,
        max_steps=4, meter=Meter(),
    )  # fmt: skip
    return model, messages


def test_the_loop_gives_the_model_a_vetoed_calls_error_and_goes_on() -> None:
    ran.clear()
    model, messages = _loop(hooks("veto_double"))
    assert ran == []
    veto = f"error: vetoed by {HERE}:veto_double: no doubling"
    assert model.requests[-1].tool_results[-1].content == veto
    assert messages[-1] == {"role": "assistant", "content": f"got {veto}"}


def test_the_loop_redacts_a_result_before_the_model_and_the_transcript_see_it() -> None:
    ran.clear()
    model, messages = _loop(hooks("redact"))
    assert ran == [{"n": 21}]
    assert SECRET not in json.dumps([list(r.messages) for r in model.requests])
    assert SECRET not in json.dumps(messages) and "42 (key [redacted])" in json.dumps(messages)


def test_a_raising_hook_ends_the_loop_with_its_failure() -> None:
    with pytest.raises(HookFailed, match=f"hook {HERE}:boom failed: ValueError"):
        _loop(hooks("boom"))
