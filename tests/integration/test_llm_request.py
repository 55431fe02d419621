"""The request :class:`bot.agent.llm.OpenAIChatModel` sends, as the (fake) server receives it."""

from __future__ import annotations

import asyncio

from pydantic import SecretStr

from bot.agent.llm import OpenAIChatModel
from bot.config import OpenAISettings
from bot.models.completion import CompletionRequest
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ScriptedModel, Text

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "calculate", "arguments": '{"expression": "2+2"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
]


async def test_messages_and_tools_reach_the_server_exactly_with_the_key() -> None:
    async with FakeOpenAI(ScriptedModel(default=Text("4.")), models=["fake-model"]) as fake:
        settings = OpenAISettings(
            base_url=fake.base_url, model="fake-model", api_key=SecretStr("sk-test"),
            max_output_tokens=300,
        )  # fmt: skip
        model = OpenAIChatModel(settings=settings)
        try:
            done = await asyncio.to_thread(
                model.complete,
                CompletionRequest(
                    model="fake-model", messages=MESSAGES, tools=TOOLS, thinking="low"
                ),
            )
        finally:
            model.close()
        [request] = fake.requests
    assert done.content == "4."
    assert request.body["messages"] == MESSAGES
    assert request.body["tools"] == TOOLS
    assert request.body["model"] == "fake-model" and request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["reasoning_effort"] == "low"
    assert request.body["max_completion_tokens"] == 300
    assert request.headers["authorization"] == "Bearer sk-test"


async def test_no_tools_sends_no_tools_key() -> None:
    async with FakeOpenAI(ScriptedModel(default=Text("hi")), models=["fake-model"]) as fake:
        model = OpenAIChatModel(settings=OpenAISettings(base_url=fake.base_url, model="fake-model"))
        try:
            await asyncio.to_thread(
                model.complete, CompletionRequest(model="fake-model", messages=MESSAGES[:2])
            )
        finally:
            model.close()
        [request] = fake.requests
    assert "tools" not in request.body
    assert request.body["messages"] == MESSAGES[:2]
