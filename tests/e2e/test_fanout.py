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
from bot.types import OutboundKind, Usage
from tests.e2e.conftest import stack_values


def main_turn(n: int, prefix: str = "task") -> ScriptedModel:
    def spawn_or_confirm(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text(f"Started {n}.")
        calls = [
            Call("sessions_spawn", {"task": f"{prefix} {i}", "label": f"L{i}"}) for i in range(n)
        ]
        return ToolCalls(calls)

    def subagent(req: ChatRequest) -> Text:
        return Text(
            f"done: {req.last_user_message}",
            delay=1.0,
            usage=Usage(prompt_tokens=100, completion_tokens=20),
        )

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), spawn_or_confirm)
        .on(is_subagent, subagent)
    )


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
        stats = re.search(
            r"· session key (agent:main:subagent:\S+) · session id ([0-9a-f]{32}) · run id "
            r"[0-9a-f]{8} · transcript fanbot:transcript:([0-9a-f]{32})$",
            text,
        )
        assert stats is not None and stats.group(2) == stats.group(3)
    assert channel.replies[0].text == "Started 3."
    assert sorted(int(re.search(r"#(\d)", a.text).group(1)) for a in channel.announces) == [1, 2, 3]  # type: ignore[union-attr]


async def test_max_concurrent_two_bounds_subagent_model_calls(redis_url: str) -> None:
    async with FakeOpenAI(main_turn(6), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url, subagents={"max_concurrent": 2})
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=4) as stack:
            await channel.say("six things please")
            await stack.wait_for(lambda: len(channel.announces) == 6, timeout=60)
        assert fake.max_overlap(lambda r: is_subagent(r.chat)) == 2
    assert all("Status: success" in a.text for a in channel.announces)


def thread_aware_model() -> ScriptedModel:
    """Spawns one run named after the thread's word; later turns echo what they can see."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("spawned")
        said = req.last_user_message
        word = "alpha" if "alpha" in said else "beta"
        if "again" in said:
            seen = [m.get("content") or "" for m in req.messages if m.get("role") == "user"]
            return Text("seen: " + " | ".join(str(s) for s in seen))
        return ToolCalls([Call("sessions_spawn", {"task": f"{word}-job", "label": word})])

    def subagent(req: ChatRequest) -> Text:
        return Text(f"result of {req.last_user_message}", delay=0.5)

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


async def test_two_threads_never_see_each_others_history_or_announces(redis_url: str) -> None:
    async with FakeOpenAI(thread_aware_model(), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        t1, t2 = channel.thread("t-alpha"), channel.thread("t-beta")
        async with Stack(
            values=stack_values(redis_url, fake.base_url), adapters=[channel], workers=3
        ) as stack:
            await channel.say("alpha work", thread=t1)
            await channel.say("beta work", thread=t2)
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
            await channel.say("alpha again", thread=t1)
            await channel.say("beta again", thread=t2)
            await stack.wait_for(lambda: len(channel.replies) == 4, timeout=40)
    for thread, mine, other in ((t1, "alpha", "beta"), (t2, "beta", "alpha")):
        [announce] = channel.of_kind(OutboundKind.ANNOUNCE, thread)
        assert f"result of {mine}-job" in announce.text
        echo = [
            r.text
            for r in channel.of_kind(OutboundKind.REPLY, thread)
            if r.text.startswith("seen:")
        ]
        assert len(echo) == 1
        assert mine in echo[0] and other not in echo[0]
        assert f"{mine}-job" in echo[0]  # the announce result is in this thread's history
    for status in channel.of_kind(OutboundKind.STATUS):
        word = "alpha" if "alpha" in status.text else "beta"
        assert status.thread == (t1 if word == "alpha" else t2)


async def test_bad_spawn_parameters_become_tool_errors_the_model_sees(redis_url: str) -> None:
    bad_calls = [
        Call("sessions_spawn", {"task": "x", "subagent_type": "nope"}),
        Call("sessions_spawn", {"task": "fallback please", "model": "no-such-model"}),
        Call("sessions_spawn", {"task": "x", "thinking": "ultra"}),
        Call("sessions_spawn", {"task": "   "}),
        Call("sessions_spawn", '{"task": "unterminated'),
    ]

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("handled")
        return ToolCalls(bad_calls)

    model = (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, lambda r: Text(f"model was {r.model}"))
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        async with Stack(
            values=stack_values(redis_url, fake.base_url), adapters=[channel], workers=2
        ) as stack:
            await channel.say("try bad things")
            await stack.wait_for(
                lambda: len(channel.announces) == 1 and len(channel.replies) == 1, timeout=40
            )
        second = next(r for r in fake.requests if r.chat.last_role == "tool")
    results = [t.content for t in second.chat.tool_results]
    assert results[0] == (
        "error: invalid arguments for sessions_spawn: subagent_type: Input should be "
        "'general-purpose', 'explore', 'plan' or 'code'"
    )
    assert '"status": "accepted"' in results[1]
    assert "unknown model 'no-such-model'; using 'fake-model'" in results[1]
    assert (
        results[2] == "error: thinking must be one of off, minimal, low, medium, high, not 'ultra'"
    )
    assert results[3].startswith(
        "error: invalid arguments for sessions_spawn: task: Value error, task is empty"
    )
    assert results[4].startswith("error: arguments for sessions_spawn are not valid JSON")
    assert channel.replies[0].text == "handled"
    announce = channel.announces[0].text
    assert "Result: model was fake-model" in announce
    assert "Notes: warning: unknown model 'no-such-model'; using 'fake-model'" in announce
