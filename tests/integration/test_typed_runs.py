"""Subagent types through the real lifecycle and an in-process model: structured results
(one correction turn), forked context, and what spawning records (type, timeout, model)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.agent.subagent import SubagentBody
from bot.agent.turn import execute_turn
from bot.config import Settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.testing.function_model import FunctionModel
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls
from bot.types import ResultFormat, RunContext, RunRecord, RunStatus, ThreadRef
from tests.integration.test_finalize import make_run
from tests.integration.test_join import turn_job

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}
SESSION = "agent:main:console:c:thread:t"


def deps_for(redis_url: str, base_url: str = "http://127.0.0.1:9/v1") -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={"base_url": base_url, "model": "fake-model", "max_retries": 0},  # type: ignore[arg-type]
        subagent_types=[  # type: ignore[list-item]
            {"name": "facts", "description": "Facts as JSON.", "output_schema": SCHEMA},
            {"name": "forked", "context": "fork", "model": "type-model"},
        ],
        agents={"main": {"model": "main-model"}},  # type: ignore[dict-item]
    )
    return Deps.build(settings)


async def run_typed(
    redis_url: str, script: ScriptedModel, type_name: str, **fields: Any
) -> tuple[RunRecord, list[ChatRequest]]:
    model = FunctionModel(script, models=["fake-model"])
    deps = deps_for(redis_url)
    make_run(deps, "r1", subagent_type=type_name, task="the task", model="fake-model", **fields)
    body = SubagentBody(deps=deps, model=model)
    await asyncio.to_thread(execute_run, deps, "r1", body)
    record = deps.runs.get("r1")
    deps.close()
    assert record is not None
    return record, model.requests


async def test_a_matching_structured_answer_is_stored_as_normalized_json(redis_url: str) -> None:
    script = ScriptedModel(
        default=Text('Here:\n```json\n{"city": "Oslo", "population": 709000}\n```')
    )
    record, requests = await run_typed(redis_url, script, "facts")
    assert record.status is RunStatus.SUCCESS
    assert json.loads(record.result) == {"city": "Oslo", "population": 709000}
    assert record.result == '{"city": "Oslo", "population": 709000}'
    assert len(requests) == 1
    system = str(requests[0].messages[0]["content"])
    assert "matches this JSON Schema" in system and '"population"' in system


async def test_a_wrong_answer_gets_one_correction_turn(redis_url: str) -> None:
    script = ScriptedModel().on(
        lambda r: "cannot be used" in r.last_user_message,
        Text('{"city": "Oslo", "population": 709000}'),
    )
    script.on(lambda r: True, Text('{"city": "Oslo", "population": "many"}'))
    record, requests = await run_typed(redis_url, script, "facts")
    assert record.status is RunStatus.SUCCESS
    assert json.loads(record.result)["population"] == 709000
    assert len(requests) == 2
    correction = requests[1].last_user_message
    assert "population: 'many' is not of type 'integer'" in correction


async def test_still_wrong_after_the_correction_ends_error_with_the_raw_answer(
    redis_url: str,
) -> None:
    script = ScriptedModel(default=Text("Oslo has about 709k people."))
    record, requests = await run_typed(redis_url, script, "facts")
    assert record.status is RunStatus.ERROR
    assert record.result == "Oslo has about 709k people."
    assert "does not match the type's output_schema after one correction" in record.notes
    assert "not valid JSON" in record.notes
    assert len(requests) == 2


async def test_a_forked_run_sees_the_requester_history_then_its_task(redis_url: str) -> None:
    def answer(req: ChatRequest) -> Text:
        seen = [str(m.get("content")) for m in req.messages if m.get("role") != "system"]
        return Text(" | ".join(seen))

    setup = deps_for(redis_url)
    setup.history.append(
        SESSION,
        {"role": "user", "content": "alice: the budget is 5k"},
        {"role": "assistant", "content": "ok"},
    )
    setup.close()
    record, _ = await run_typed(
        redis_url, ScriptedModel(default=answer), "forked", context=RunContext.FORK
    )
    assert record.result.startswith("alice: the budget is 5k | ok | The messages above")
    assert record.result.endswith("Your task:\nthe task")


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        # The spawning turn is still going: its message is not in the history yet.
        (["alice: hi"], "alice: hi | alice: compare | The messages"),
        # The turn ended (and wrote its message) before the run started: seen once.
        (["alice: hi", "alice: compare"], "alice: hi | alice: compare | The messages"),
    ],
)
async def test_a_forked_run_sees_the_spawning_turns_message_once(
    redis_url: str, stored: list[str], expected: str
) -> None:
    def answer(req: ChatRequest) -> Text:
        seen = [str(m.get("content")) for m in req.messages if m.get("role") != "system"]
        return Text(" | ".join(seen))

    setup = deps_for(redis_url)
    setup.history.append(SESSION, *({"role": "user", "content": c} for c in stored))
    setup.close()
    record, _ = await run_typed(
        redis_url,
        ScriptedModel(default=answer),
        "forked",
        context=RunContext.FORK,
        fork_message="alice: compare",
    )
    assert record.result.startswith(expected)


async def test_a_turn_that_spawns_a_forked_run_hands_it_the_turns_message(
    redis_url: str,
) -> None:
    spawn_call = ToolCalls([Call("sessions_spawn", {"task": "dig", "context": "fork"})])
    script = ScriptedModel(default=Text("Started.")).on(
        lambda r: r.has_tool("sessions_spawn") and r.last_role == "user", spawn_call, times=1
    )
    deps = deps_for(redis_url)
    model = FunctionModel(script, models=["fake-model"])
    job = turn_job(session_key=SESSION, text="compare these two offers")
    await asyncio.to_thread(execute_turn, deps, model, job)
    (run,) = deps.runs.session_runs(SESSION)
    deps.close()
    assert run.context is RunContext.FORK
    assert run.fork_message == "Alice: compare these two offers"


def test_only_a_forked_run_keeps_the_spawning_message(deps: Deps) -> None:
    forked = spawn(deps, subagent_type="forked", fork_message="alice: go")
    isolated = spawn(deps, subagent_type="facts", fork_message="alice: go")
    assert (forked.fork_message, isolated.fork_message) == ("alice: go", "")
    stored = deps.runs.get(forked.run_id)
    assert stored is not None and stored.fork_message == "alice: go"


def spawn(deps: Deps, **fields: Any) -> RunRecord:
    thread = ThreadRef(platform="console", account="a", chat="c", thread="t")
    request = SpawnRequest(
        task="t",
        session_key=SESSION,
        thread=thread,
        requester="console:a",
        agent_id="main",
        **fields,
    )
    return spawn_run(deps, request, known_models=lambda: None)


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    built = deps_for(redis_url)
    yield built
    built.close()


def test_spawn_records_the_types_context_result_format_and_model(deps: Deps) -> None:
    facts = spawn(deps, subagent_type="facts")
    assert (facts.result_format, facts.context) == (ResultFormat.JSON, RunContext.ISOLATED)
    assert facts.model == "main-model"  # the agent's own model, not the global default
    forked = spawn(deps, subagent_type="forked")
    assert (forked.context, forked.model) == (RunContext.FORK, "type-model")
    isolated = spawn(deps, subagent_type="forked", context=RunContext.ISOLATED)
    assert isolated.context is RunContext.ISOLATED
    stored = deps.runs.get(forked.run_id)
    assert stored is not None and stored.context is RunContext.FORK


def test_spawn_timeout_zero_is_the_maximum_and_more_is_cut(deps: Deps) -> None:
    maximum = deps.settings.subagents.max_run_timeout_seconds
    assert spawn(deps, timeout_s=0).timeout_s == maximum
    cut = spawn(deps, timeout_s=maximum + 1)
    assert cut.timeout_s == maximum
    assert any("above the maximum" in w for w in cut.warnings)
    assert spawn(deps).timeout_s == deps.settings.subagents.run_timeout_seconds
