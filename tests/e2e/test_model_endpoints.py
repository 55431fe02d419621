"""Named endpoints and fallbacks with forked workers: a run whose model's endpoint is
overloaded is answered by its fallback and its card says so; a spawn naming another
endpoint's model reaches that endpoint (docs/models.md, "Named endpoints", "Fallbacks")."""

from __future__ import annotations

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Fail,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values


def main_turn() -> ScriptedModel:
    def spawn_or_confirm(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started 2.")
        return ToolCalls(
            [
                Call("sessions_spawn", {"task": "on the cloud", "label": "cloud"}),
                Call("sessions_spawn", {"task": "on the box", "label": "box", "model": "local/x"}),
            ]
        )

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), spawn_or_confirm)
        .on(is_subagent, Fail(529, message="Overloaded"))
    )


async def test_a_fallback_answers_and_a_named_model_reaches_its_endpoint(redis_url: str) -> None:
    local_model = ScriptedModel(default=lambda r: Text(f"{r.model} did: {r.last_user_message}"))
    async with (
        FakeOpenAI(main_turn(), models=["fake-model"]) as cloud,
        FakeOpenAI(local_model, models=["qwen3", "x"]) as local,
    ):
        values = stack_values(
            redis_url,
            cloud.base_url,
            models={
                "endpoints": {"local": {"base_url": local.base_url, "model": "qwen3"}},
                "models": {"fake-model": {"fallbacks": ["local/qwen3"]}},
            },
        )
        values["openai"]["max_retries"] = 0
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("two things please")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
            await stack.wait_for(lambda: len(channel.replies) == 1)
        assert sorted(r.body["model"] for r in local.requests) == ["qwen3", "x"]
    cards = {a.text.split('"')[1]: a.text for a in channel.announces}
    assert "Result: qwen3 did: on the cloud" in cards["cloud"]
    assert "answered by local/qwen3 (fake-model overloaded)" in cards["cloud"]
    assert "Result: x did: on the box" in cards["box"]
    assert "answered by" not in cards["box"]
    assert channel.replies[0].text == "Started 2."
