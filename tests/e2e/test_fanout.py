"""A message fans out to subagents on forked workers; each announces into its thread."""

from __future__ import annotations

import re

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import Usage
from tests.e2e.conftest import stack_values


def main_turn(n: int, prefix: str = "task") -> ScriptedModel:
    def spawn_or_confirm(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text(f"Started {n}.")
        calls = [Call("sessions_spawn", {"task": f"{prefix} {i}", "label": f"L{i}"}) for i in range(n)]
        return ToolCalls(calls)

    def subagent(req: ChatRequest) -> Text:
        return Text(f"done: {req.last_user_message}", delay=1.0, usage=Usage(prompt_tokens=100, completion_tokens=20))

    return ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), spawn_or_confirm).on(is_subagent, subagent)


async def test_three_spawns_run_in_parallel_and_announce_in_the_thread(redis_url: str) -> None:
    async with FakeOpenAI(main_turn(3), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url, fake.base_url, prices={"fake-model": {"input": 1.0, "output": 2.0}}
        )
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=4) as stack:
            await channel.say("please do three things")
            await stack.wait_for(lambda: len(channel.announces) == 3, timeout=40)
            await stack.wait_for(lambda: len(channel.replies) == 1)
        assert fake.max_overlap(lambda r: is_subagent(r.chat)) == 3
    thread = channel.thread()
    for announce in channel.announces:
        assert announce.thread == thread
        text = announce.text
        assert re.search(r'^✅ Subagent #\d "L\d" \(general-purpose\) finished$', text, re.M)
        assert "Status: success" in text
        n = re.search(r'"L(\d)"', text).group(1)  # type: ignore[union-attr]
        assert f"Result: done: task {n}" in text
        assert "tokens 120 (in 100 / out 20)" in text
        assert "est $0.0001" in text  # (100 × $1 + 20 × $2) / 1M
        assert "session agent:main:subagent:" in text and "transcript fanbot:transcript:" in text
    assert channel.replies[0].text == "Started 3."
    assert sorted(int(re.search(r"#(\d)", a.text).group(1)) for a in channel.announces) == [1, 2, 3]  # type: ignore[union-attr]
