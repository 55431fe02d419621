"""``/model``, ``/new``, ``/status`` and ``/usage`` through the real gateway and a forked
worker (docs/chat-commands.md): the model a person switches to answers the next message in
that thread, another thread keeps the agent's, and ``/new`` starts the thread afresh."""

from __future__ import annotations

import pytest

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ChatRequest, ScriptedModel, Text
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e


def answer(request: ChatRequest) -> Text:
    seen = sum(m.get("role") == "user" for m in request.messages)
    return Text(f"{request.model} answers ({seen} user message(s) seen)")


async def test_model_new_status_and_usage_through_the_gateway(redis_url: str) -> None:
    async with FakeOpenAI(ScriptedModel(default=answer), models=["fake-model", "fake-big"]) as fake:
        values = stack_values(redis_url, fake.base_url, models={"allowed": ["fake-big"]})
        channel = MemoryChannel()
        here, other = channel.thread("one"), channel.thread("two")
        async with Stack(values=values, adapters=[channel], workers=1) as stack:

            async def say(text: str, n: int, thread: object = here) -> str:
                await channel.say(text, thread=thread)  # type: ignore[arg-type]
                await stack.wait_for(lambda: len(channel.replies) == n, timeout=30)
                return channel.replies[-1].text

            assert await say("hello", 1) == "fake-model answers (1 user message(s) seen)"
            assert "now uses `fake-big`" in await say("/model fake-big", 2)
            assert await say("and now?", 3) == "fake-big answers (2 user message(s) seen)"
            assert (await say("elsewhere", 4, other)).startswith("fake-model answers")
            assert "not one of the models you may pick" in await say("/model gpt-x", 5)

            status = await say("/status", 6)
            assert "Model: `fake-big` (this thread's own" in status
            usage = await say("/usage", 7)
            assert "• This thread: 0 tokens" not in usage, usage

            assert "forgot this thread's 4 earlier message(s)" in await say("/reset", 8)
            assert await say("fresh?", 9) == "fake-big answers (1 user message(s) seen)"
        assert [r.body["model"] for r in fake.requests] == [
            "fake-model", "fake-big", "fake-model", "fake-big",
        ]  # fmt: skip
