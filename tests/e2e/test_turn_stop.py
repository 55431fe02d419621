"""``/stop`` while the main agent waits for the model ends the turn with a closing line."""

from __future__ import annotations

from bot.agent.turn import STOPPED_IN_MODEL_CALL
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Hang, ScriptedModel
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values


async def test_stop_during_a_model_call_says_so_in_the_thread(redis_url: str) -> None:
    model = ScriptedModel(default=lambda r: Hang(120))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents={"hard_kill_grace_seconds": 1})
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("think very hard")
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=20)
            await channel.say("/stop")
            await stack.wait_for(lambda: len(channel.replies) == 2, timeout=30)
        assert fake.in_flight == 0
    texts = [r.text for r in channel.replies]
    assert texts[0].startswith("⏹️ Stopping the answer in progress.")
    assert texts[1] == STOPPED_IN_MODEL_CALL
