"""Stall detection on forked workers: a silent run ends ``timeout`` (stalled), a slow one that
keeps streaming tokens does not."""

from __future__ import annotations

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Hang,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values

SLOW = "a slow answer, " * 12  # 180 characters: ~23 chunks of 8, one every 0.4 s (~9 s)


def script() -> ScriptedModel:
    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        tasks = [("silent", "S"), ("trickle", "T")]
        return ToolCalls([Call("sessions_spawn", {"task": t, "label": lb}) for t, lb in tasks])

    def subagent(req: ChatRequest) -> ToolCalls | Text | Hang:
        if "trickle" in req.last_user_message:
            return Text(SLOW, chunk_delay=0.4)
        if req.last_role == "tool":
            return Hang(60)  # the model never answers the second call
        return ToolCalls([Call("current_time", {})], content="half way there")

    return (
        ScriptedModel().on(is_subagent, subagent).on(lambda r: r.has_tool("sessions_spawn"), main)
    )


async def test_a_silent_run_ends_stalled_while_a_trickling_one_finishes(redis_url: str) -> None:
    async with FakeOpenAI(script(), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            openai={"request_timeout": 60, "max_retries": 0},
            subagents={
                "stall_seconds": 1.5,
                "stall_tool_seconds": 30,
                "stall_grace_seconds": 1.5,
                "announce": "cards",
            },
        )
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=3) as stack:
            await channel.say("two runs please")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=60)
    by_label = {("S" if '"S"' in a.text else "T"): a.text for a in channel.announces}
    silent, trickle = by_label["S"], by_label["T"]
    assert "Status: timeout" in silent
    assert "Result: half way there" in silent  # the partial result
    assert "stalled: no model output and no tool event for" in silent
    assert "last activity: model call sent" in silent
    assert "Status: success" in trickle and SLOW.strip() in trickle
    cards = [m.text for m in channel.sent] + [e.text for e in channel.edits]
    assert any('"S"' in t and "no progress for" in t and "unless it moves" in t for t in cards)
    assert not any('"T"' in t and "no progress for" in t for t in cards)
