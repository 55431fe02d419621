"""A run parked for approval, in process against a real Redis and an in-process model: the gate
stops the step at the call that needs a person (the calls before it ran), the run parks with
the request in the outbox, and after the decision the resumed body runs the decided call,
then the rest of the step, then goes on with the model."""

from __future__ import annotations

import asyncio
import json

from bot.agent.subagent import SubagentBody
from bot.config import Settings
from bot.deps import Deps
from bot.runs.approval_gate import DecisionRequest, decide
from bot.runs.execute import execute_run
from bot.testing.function_model import FunctionModel
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.types import RunStatus
from tests.integration.test_finalize import make_run


def script(request: ChatRequest) -> Reply:
    """One step with three calls: an ungated one, a gated one, another ungated one."""
    results = [m.get("content") for m in request.messages if m.get("role") == "tool"]
    if results:
        return Text("results: " + " | ".join(str(r) for r in results))
    return ToolCalls(
        [
            Call("calculate", {"expression": "1+1"}),
            Call("calculate_gated", {"expression": "6*7"}),
            Call("calculate", {"expression": "2+2"}),
        ]
    )


def deps_for(redis_url: str, base_url: str) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={"base_url": base_url, "model": "fake-model", "max_retries": 0},  # type: ignore[arg-type]
        tools={"require_approval": ["calculate_gated"]},  # type: ignore[arg-type]
    )
    return Deps.build(settings)


async def test_the_step_parks_at_the_gated_call_and_goes_on_after_a_denial(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url, "http://127.0.0.1:9/v1")
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    make_run(deps, "r1", task="the task", model="fake-model")
    status = await asyncio.to_thread(execute_run, deps, "r1", SubagentBody(deps=deps, model=model))
    assert status == "parked"
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.RUNNING
    assert record.parked_at is not None and record.approval_id
    approval = deps.approvals.get(record.approval_id)
    assert approval is not None
    assert [c.name for c in approval.calls] == ["calculate_gated", "calculate"]
    transcript = deps.transcripts.read(record.session_id)
    assert [m["content"] for m in transcript if m.get("role") == "tool"] == ["2"]
    [request] = [
        json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)
        if b"approval:" in f[b"data"]
    ]  # fmt: skip
    assert [a["id"] for a in request["actions"]] == [
        f"!approve {approval.approval_id}", f"!deny {approval.approval_id}"
    ]  # fmt: skip

    answer = decide(
        deps, DecisionRequest(approval_id=approval.approval_id, approve=False),
        platform="console", user_id="alice",
    )  # fmt: skip
    assert not answer.refused
    body = SubagentBody(deps=deps, model=model, resume_approval=approval.approval_id)
    status = await asyncio.to_thread(execute_run, deps, "r1", body, resume=True)
    deps.close()
    assert status == "success"
    reader = Deps.build(Settings(redis_url=redis_url))
    done = reader.runs.get("r1")
    reader.close()
    assert done is not None and done.parked_at is None
    assert done.result == ("results: 2 | error: denied by @alice; the call did not run | 4")
