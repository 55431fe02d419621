"""The request :class:`bot.agent.llm.OpenAIChatModel` sends per server kind, through the real
SDK to the fake server, and what it learns from a 400 naming a refused parameter."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from pydantic import SecretStr

from bot.agent.llm import OpenAIChatModel
from bot.config import OpenAISettings
from bot.demo.replies import Call, ChatRequest, Fail, Reply, Text, ToolCalls
from bot.models.completion import Completion, CompletionRequest
from bot.models.dialect import OPTIONAL, dialect_for
from bot.testing.fake_openai import FakeOpenAI, RecordedRequest
from bot.testing.scripted import ScriptedModel

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
MESSAGES = [{"role": "user", "content": "2+2?"}]


async def ask(
    fake: FakeOpenAI, kind: str, *, times: int = 1, key: str = "sk-test"
) -> list[Completion]:
    settings = OpenAISettings(
        base_url=fake.base_url, model="m", api_key=SecretStr(key), max_output_tokens=300,
        kind=kind,  # type: ignore[arg-type]
    )  # fmt: skip
    model = OpenAIChatModel(settings=settings)
    request = CompletionRequest(model="m", messages=MESSAGES, tools=TOOLS, thinking="low")
    try:
        return [await asyncio.to_thread(model.complete, request) for _ in range(times)]
    finally:
        model.close()


def optional(request: RecordedRequest) -> dict[str, Any]:
    return {k: v for k, v in request.body.items() if k in OPTIONAL}


KINDS = ["openai", "azure", "openrouter", "litellm", "vllm", "ollama", "llamacpp", "lmstudio",
         "gemini", "anthropic", "deepseek", "mistral", "groq", "generic"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
async def test_each_kind_sends_its_dialect(kind: str) -> None:
    answer = ToolCalls([Call("calculate", {"expression": "2+2"}, id="c1")])
    async with FakeOpenAI(ScriptedModel(default=answer), models=["m"]) as fake:
        [done] = await ask(fake, kind)
        [request] = fake.requests
    dialect = dialect_for(kind, None)
    expected = dialect.shape(model="m", max_output_tokens=300, thinking="low", has_tools=True)
    assert optional(request) == expected
    assert request.body["messages"] == MESSAGES and request.body["tools"] == TOOLS
    [call] = done.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "calculate", '{"expression": "2+2"}')
    assert done.finish_reason == "tool_calls"
    # The fake streams usage only when asked: a kind that does not ask gets an estimate.
    assert done.usage.estimated is (not dialect.include_usage)
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0


async def test_azure_sends_its_key_in_api_key_and_no_bearer() -> None:
    async with FakeOpenAI(ScriptedModel(default=Text("hi")), models=["m"]) as fake:
        await ask(fake, "azure", key="azure-secret")
        await ask(fake, "openai", key="sk-other")
        azure, openai_ = fake.requests
    assert azure.headers["api-key"] == "azure-secret" and "authorization" not in azure.headers
    assert (
        openai_.headers["authorization"] == "Bearer sk-other" and "api-key" not in openai_.headers
    )


async def test_azure_lists_models_with_its_header() -> None:
    async with FakeOpenAI(ScriptedModel(default=Text("hi")), models=["m"]) as fake:
        settings = OpenAISettings(
            base_url=fake.base_url, api_key=SecretStr("azure-secret"), kind="azure"
        )
        model = OpenAIChatModel(settings=settings)
        try:
            assert await asyncio.to_thread(model.known_models) == frozenset({"m"})
        finally:
            model.close()


def refusing(parameter: str, message: str, status: int = 400) -> Any:
    def script(chat: ChatRequest) -> Reply:
        if parameter in chat.body:
            return Fail(status, message=message)
        return Text("4")

    return script


async def test_a_refused_token_parameter_is_switched_once_and_remembered() -> None:
    said = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    async with FakeOpenAI(refusing("max_tokens", said), models=["m"]) as fake:
        done = await ask(fake, "vllm", times=2)
        sent = [optional(r) for r in fake.requests]
        statuses = [r.status for r in fake.requests]
    assert [d.content for d in done] == ["4", "4"]
    assert statuses == [400, 200, 200]  # one refusal, one retry, then learned
    assert sent[0]["max_tokens"] == 300
    assert sent[1]["max_completion_tokens"] == 300 and "max_tokens" not in sent[1]
    assert sent[2] == sent[1]


async def test_stream_options_refused_422_is_dropped_and_usage_estimated() -> None:
    said = "Extra inputs are not permitted: body.stream_options.include_usage"
    async with FakeOpenAI(refusing("stream_options", said, 422), models=["m"]) as fake:
        done = await ask(fake, "generic", times=2)
        sent = [optional(r) for r in fake.requests]
    assert "stream_options" in sent[0] and "stream_options" not in sent[1]
    assert len(sent) == 3 and sent[2] == sent[1]
    assert all(d.usage.estimated and d.content == "4" for d in done)


async def test_another_400_is_not_retried() -> None:
    said = "This model's maximum context length is 4096 tokens."
    async with FakeOpenAI(refusing("messages", said), models=["m"]) as fake:
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            await ask(fake, "vllm")
        assert len(fake.requests) == 1


async def test_both_token_parameters_refused_means_neither_is_sent() -> None:
    def script(chat: ChatRequest) -> Reply:
        for name in ("max_tokens", "max_completion_tokens"):
            if name in chat.body:
                return Fail(400, message=f"Unsupported parameter: '{name}'")
        return Text("ok")

    async with FakeOpenAI(script, models=["m"]) as fake:
        settings = OpenAISettings(
            base_url=fake.base_url, model="m", max_output_tokens=300, kind="vllm"
        )
        model = OpenAIChatModel(settings=settings)
        request = CompletionRequest(model="m", messages=MESSAGES)
        try:
            # max_tokens refused, switched, max_completion_tokens refused: one retry only.
            with pytest.raises(openai.BadRequestError, match="max_completion_tokens"):
                await asyncio.to_thread(model.complete, request)
            done = await asyncio.to_thread(model.complete, request)
            again = await asyncio.to_thread(model.complete, request)
        finally:
            model.close()
        statuses = [r.status for r in fake.requests]
        last = optional(fake.requests[-1])
    assert statuses == [400, 400, 400, 200, 200]
    assert done.content == again.content == "ok"
    assert "max_tokens" not in last and "max_completion_tokens" not in last
