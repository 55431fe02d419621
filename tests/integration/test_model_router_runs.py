"""Named endpoints and fallbacks through the real lifecycle: two wire fakes reached by the
real ``openai`` SDK through the router, real Redis (docs/models.md, "Named endpoints" and
"Fallbacks")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from bot.agent.router import ModelRouter
from bot.agent.subagent import SubagentBody
from bot.agent.turn import execute_turn
from bot.config import Settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.testing import FakeOpenAI
from bot.testing.netutil import free_port
from bot.testing.scripted import Call, Fail, ScriptedModel, Text, ToolCalls
from bot.types import RunStatus
from tests.integration.test_finalize import make_run
from tests.integration.test_join import turn_job

SESSION = "agent:main:console:c:thread:t"


@pytest.fixture
def local() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(ScriptedModel(default=Text("answered locally")), models=["qwen3", "x"]) as fake:
        yield fake


def fleet(redis_url: str, primary_url: str, local_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        openai={"base_url": primary_url, "model": "gpt-4o", "max_retries": 0},  # type: ignore[arg-type]
        models={  # type: ignore[arg-type]
            "endpoints": {"local": {"base_url": local_url, "model": "qwen3", "max_retries": 0}},
            "models": {"gpt-4o": {"fallbacks": ["local/qwen3"]}},
        },
    )


def announce_of(deps: Deps) -> str:
    entries = deps.redis.xrange(deps.keys.outbox)
    texts = [json.loads(e[1][b"data"])["text"] for e in entries]
    return next(t for t in texts if "Status:" in t)


async def run_on(settings: Settings, **fields: Any) -> tuple[Deps, ModelRouter]:
    deps = Deps.build(settings)
    model = ModelRouter(settings, limits=deps.model_limits)
    make_run(deps, "r1", task="the task", model="gpt-4o", **fields)
    await asyncio.to_thread(execute_run, deps, "r1", SubagentBody(deps=deps, model=model))
    return deps, model


async def test_an_overloaded_primary_is_answered_by_its_fallback(
    redis_url: str, local: FakeOpenAI
) -> None:
    overloaded = Fail(529, message="Overloaded")
    with FakeOpenAI(ScriptedModel(default=overloaded)) as primary:
        deps, model = await run_on(fleet(redis_url, primary.base_url, local.base_url))
        assert [r.status for r in primary.requests] == [529]
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.SUCCESS
    assert record.result == "answered locally"
    assert (record.answered_by, record.fallback_reason) == ("local/qwen3", "gpt-4o overloaded")
    assert [r.body["model"] for r in local.requests] == ["qwen3"]
    assert "answered by local/qwen3 (gpt-4o overloaded)" in announce_of(deps)
    model.close()
    deps.close()


async def test_an_unreachable_primary_is_answered_by_its_fallback(
    redis_url: str, local: FakeOpenAI
) -> None:
    refused = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    deps, model = await run_on(fleet(redis_url, refused, local.base_url))
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.SUCCESS
    assert (record.answered_by, record.fallback_reason) == ("local/qwen3", "gpt-4o unreachable")
    assert "answered by local/qwen3 (gpt-4o unreachable)" in announce_of(deps)
    model.close()
    deps.close()


async def test_a_primary_that_answers_leaves_no_fallback_note(
    redis_url: str, local: FakeOpenAI
) -> None:
    with FakeOpenAI(ScriptedModel(default=Text("from the cloud"))) as primary:
        deps, model = await run_on(fleet(redis_url, primary.base_url, local.base_url))
    record = deps.runs.get("r1")
    assert record is not None and (record.result, record.answered_by) == ("from the cloud", "")
    assert "answered by" not in announce_of(deps)
    assert local.requests == []
    model.close()
    deps.close()


async def test_when_the_fallback_fails_too_the_notes_name_its_endpoint(redis_url: str) -> None:
    refused = f"http://127.0.0.1:{free_port()}/v1"
    with FakeOpenAI(ScriptedModel(default=Fail(503, message="busy"))) as primary:
        deps, model = await run_on(fleet(redis_url, primary.base_url, refused))
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.ERROR
    assert f"cannot reach the model endpoint at {refused}" in record.notes
    assert "(fallback local/qwen3, after gpt-4o overloaded)" in record.notes
    model.close()
    deps.close()


async def test_sessions_spawn_with_a_named_endpoints_model_reaches_it(
    redis_url: str, local: FakeOpenAI
) -> None:
    spawn = ToolCalls([Call("sessions_spawn", {"task": "dig", "model": "local/x"})])
    script = ScriptedModel(default=Text("Started.")).on(
        lambda r: r.has_tool("sessions_spawn") and r.last_role == "user", spawn, times=1
    )
    with FakeOpenAI(script, models=["gpt-4o"]) as primary:
        settings = fleet(redis_url, primary.base_url, local.base_url)
        deps = Deps.build(settings)
        model = ModelRouter(settings, limits=deps.model_limits)
        reply = await asyncio.to_thread(execute_turn, deps, model, turn_job(session_key=SESSION))
        assert reply == "Started."
        (run,) = deps.runs.session_runs(SESSION)
        assert (run.model, run.warnings) == ("local/x", ())
        body = SubagentBody(deps=deps, model=model)
        await asyncio.to_thread(execute_run, deps, run.run_id, body)
    assert [r.body["model"] for r in local.requests] == ["x"]
    ended = deps.runs.get(run.run_id)
    assert ended is not None and ended.result == "answered locally"
    assert ended.answered_by == ""  # its own model answered
    model.close()
    deps.close()


async def test_a_turn_answered_by_a_fallback_says_so(redis_url: str, local: FakeOpenAI) -> None:
    with FakeOpenAI(ScriptedModel(default=Fail(529, message="Overloaded"))) as primary:
        settings = fleet(redis_url, primary.base_url, local.base_url)
        deps = Deps.build(settings)
        model = ModelRouter(settings, limits=deps.model_limits)
        reply = await asyncio.to_thread(execute_turn, deps, model, turn_job(session_key=SESSION))
    assert reply == "answered locally\n\n_(answered by local/qwen3 (gpt-4o overloaded))_"
    model.close()
    deps.close()
