"""``bot.testing.FunctionModel``: the agent loop against an in-process model, no server.

The same replies a ``FakeOpenAI`` script returns (``Text``, ``ToolCalls``) drive a whole
tool loop in one thread; usage is counted as the wire fake counts it.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from bot.agent.completion import ChatModel, CompletionRequest
from bot.agent.context import ToolContext
from bot.agent.loop import run_loop
from bot.agent.tools import Tool
from bot.steps import LoopControl, Meter
from bot.testing import Call, ChatRequest, FunctionModel, ScriptedModel, Text, ToolCalls
from bot.types import ThreadRef, Usage

THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")


def _ctx() -> ToolContext:
    # The tools below never touch the stores, so no Redis is needed.
    deps = cast(Any, None)
    return ToolContext(deps=deps, session_key="s", thread=THREAD, requester="u", agent_id="main")


def _double(ctx: ToolContext, args: dict[str, Any]) -> str:
    return str(2 * int(args["n"]))


DOUBLE = Tool(
    name="double",
    description="Twice n.",
    run=_double,
    schema_json={"type": "object", "properties": {"n": {"type": "integer"}}},
)


def test_a_tool_loop_runs_in_process_with_the_functions_answers() -> None:
    def answer(request: ChatRequest) -> Text | ToolCalls:
        if request.last_role == "tool":
            return Text(f"twice 21 is {request.tool_results[-1].content}")
        return ToolCalls([Call("double", {"n": 21})])

    model = FunctionModel(answer)
    meter = Meter()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "double 21"}]
    result = run_loop(
        model=model, model_name="m", messages=messages, tools=[DOUBLE], ctx=_ctx(),
        max_steps=4, meter=meter,
    )  # fmt: skip
    assert (result.text, result.complete) == ("twice 21 is 42", True)
    assert [r.tools for r in model.requests] == [("double",), ("double",)]
    assert [r.last_role for r in model.requests] == ["user", "tool"]
    assert meter.steps == 2 and meter.usage.prompt_tokens > 0


def test_usage_is_the_replys_own_else_estimated_and_ids_are_stable() -> None:
    model: ChatModel = FunctionModel(
        ScriptedModel(default=Text("hi", usage=Usage(prompt_tokens=7, completion_tokens=3)))
        .on("call", ToolCalls([Call("double", {"n": 1})]))
    )  # fmt: skip
    said = model.complete(
        CompletionRequest(model="m", messages=[{"role": "user", "content": "say"}])
    )
    assert (said.content, said.usage, said.finish_reason) == (
        "hi",
        Usage(prompt_tokens=7, completion_tokens=3),
        "stop",
    )
    called = model.complete(
        CompletionRequest(model="m", messages=[{"role": "user", "content": "call it"}])
    )
    assert [(c.id, c.name, c.arguments) for c in called.tool_calls] == [
        ("call_1_0", "double", '{"n": 1}')
    ]
    assert called.finish_reason == "tool_calls" and called.usage.completion_tokens > 0


def test_known_models_and_what_it_cannot_answer() -> None:
    assert FunctionModel(lambda r: Text("x")).known_models() is None
    assert FunctionModel(lambda r: Text("x"), models=["a"]).known_models() == {"a"}
    with pytest.raises(TypeError, match="Text or ToolCalls"):
        FunctionModel(ScriptedModel()).complete(CompletionRequest(model="m", messages=[]))


def test_the_meter_keeps_cached_reasoning_and_estimated_usage_and_the_card_marks_it() -> None:
    reported = Usage(prompt_tokens=50, completion_tokens=10, cached_tokens=40, reasoning_tokens=6)
    counted = Usage(prompt_tokens=70, completion_tokens=4, estimated=True)
    script = (
        ScriptedModel(default=Text("done", usage=reported))
        .on(lambda r: r.last_role == "user", ToolCalls([Call("double", {"n": 2})], usage=counted))
    )  # fmt: skip
    shown: list[str] = []
    meter = Meter()
    run_loop(
        model=FunctionModel(script), model_name="m", ctx=_ctx(), tools=[DOUBLE], max_steps=4,
        messages=[{"role": "user", "content": "double 2"}], meter=meter,
        control=LoopControl(progress=shown.append),
    )  # fmt: skip
    assert meter.usage == reported + counted and meter.usage.estimated
    assert shown == ["step 1 · 🔧 double(2) · ~74 tokens"]  # counted by fanbot: marked
