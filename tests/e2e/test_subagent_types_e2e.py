"""Subagent types on forked workers: compiled types (a plain Python runnable and a real
LangGraph graph), a structured type's announce, and a compiled run that never yields
ending at its soft deadline."""

from __future__ import annotations

from typing import Any

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values

TYPES = [
    {"name": "echo", "description": "Echoes.", "runnable": "tests.compiled_runnables:echo"},
    {"name": "graph", "description": "A graph.", "runnable": "tests.compiled_graph:graph"},
    {"name": "hang", "description": "Never ends.", "runnable": "tests.compiled_runnables:hang"},
    {
        "name": "facts",
        "description": "City facts as JSON.",
        "output_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["city", "population"],
        },
    },
]


def spawner(*spawns: dict[str, Any]) -> ScriptedModel:
    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        return ToolCalls([Call("sessions_spawn", s) for s in spawns])

    subagent = Text('```json\n{"city": "Oslo", "population": 709000}\n```')
    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(lambda r: "JSON Schema" in str(r.messages[0].get("content")), subagent)
    )


async def test_compiled_types_run_on_forked_workers_and_announce(redis_url: str) -> None:
    model = spawner(
        {"task": "ping", "subagent_type": "echo", "label": "E"},
        {"task": "rivers", "subagent_type": "graph", "label": "G"},
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=TYPES)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
        spawn_request = next(r for r in fake.requests if "sessions_spawn" in str(r.body))
    texts = sorted(a.text for a in channel.announces)
    assert '✅ Subagent #1 "E" (echo) finished' in texts[0] and "Result: echo: ping" in texts[0]
    assert '"G" (graph) finished' in texts[1]
    assert (
        "Result: summary: notes on rivers" in texts[1] and "tokens 16 (in 11 / out 5)" in texts[1]
    )
    tools = spawn_request.body["tools"]
    spawn_tool = next(t for t in tools if t["function"]["name"] == "sessions_spawn")
    enum = spawn_tool["function"]["parameters"]["properties"]["subagent_type"]["enum"]
    assert enum == ["general-purpose", "explore", "plan", "code", "echo", "graph", "hang", "facts"]


async def test_a_structured_type_announces_its_json_readably(redis_url: str) -> None:
    model = spawner({"task": "Oslo", "subagent_type": "facts", "label": "F"})
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=TYPES)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("facts please")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
    text = channel.announces[0].text
    assert "Status: success" in text
    assert "Result:\n- city: Oslo\n- population: 709000" in text


async def test_a_compiled_run_that_never_yields_times_out(redis_url: str) -> None:
    model = spawner({"task": "wait", "subagent_type": "hang", "runTimeoutSeconds": 2})
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=TYPES)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
    text = channel.announces[0].text
    assert "Status: timeout" in text and "run timeout of 2s reached" in text


async def test_stop_ends_a_compiled_run_that_never_yields(redis_url: str) -> None:
    model = spawner({"task": "wait", "subagent_type": "hang", "label": "H"})
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=TYPES)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: bool(stack.pool.run_pids()), timeout=30)
            await stack.wait_for(lambda: len(channel.replies) == 1, timeout=30)
            await channel.say("/subagents stop 1")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=20)
    text = channel.announces[0].text
    assert "Status: stopped" in text and '"H" (hang) was stopped' in text
