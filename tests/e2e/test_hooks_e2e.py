"""Hooks on forked workers (docs/hooks.md): a type whose hooks redact a secret from a tool
result and veto a tool, and a type whose hook raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values
from tests.e2e.hook_examples import SECRET

HOOKS = "tests.e2e.hook_examples"
TYPES = [
    {
        "name": "guarded",
        "description": "Redacts secrets, may not touch files.",
        "tools": ["touch", "leak"],
        "middleware": [f"{HOOKS}:redact_secrets", f"{HOOKS}.no_touch"],
    },
    {"name": "fragile", "description": "Its hook breaks.", "middleware": [f"{HOOKS}:broken"]},
]
VETO = f"error: vetoed by {HOOKS}.no_touch: touching files is not allowed here"


def values(redis_url: str, base_url: str) -> dict[str, Any]:
    return stack_values(
        redis_url, base_url, subagent_types=TYPES, tools={"extra": [f"{HOOKS}:tools"]}
    )


def spawning(type_for: dict[str, str]) -> ScriptedModel:
    """The main agent spawns the type its user message names; the subagent calls its tools
    once, then answers."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        word = req.last_user_message.split(":")[-1].strip()
        return ToolCalls([Call("sessions_spawn", {"task": word, "subagent_type": type_for[word]})])

    return ScriptedModel(default=Text("done")).on(lambda r: r.has_tool("sessions_spawn"), main)


async def test_hooks_redact_a_result_and_veto_a_tool(redis_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "touched.txt"
    model = spawning({"guard": "guarded"}).on(
        lambda r: r.last_role == "user" and r.has_tool("touch"),
        ToolCalls([Call("touch", {"path": str(marker)}), Call("leak", {})]),
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        async with Stack(values=values(redis_url, fake.base_url), adapters=[channel]) as stack:
            await channel.say("guard")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
            await channel.say("/subagents log 1 tools")
            await stack.wait_for(lambda: "vetoed" in channel.replies[-1].text, timeout=20)
            log_text = channel.replies[-1].text
        bodies = [json.dumps(r.body) for r in fake.requests]
    assert not marker.exists()  # the vetoed tool never ran
    after_tools = next(
        r.body["messages"]
        for r in fake.requests
        if r.body["messages"][-1]["role"] == "tool"
        and "sessions_spawn" not in [t["function"]["name"] for t in r.body["tools"]]
    )
    results = [m["content"] for m in after_tools if m["role"] == "tool"]
    assert results[0] == VETO
    assert "api_key=[redacted]" in results[1]
    assert not any(SECRET in body for body in bodies)  # never reached the model
    assert VETO in log_text and SECRET not in log_text and "[redacted]" in log_text
    assert "Status: success" in channel.announces[0].text
    print(log_text)  # the note quotes it


async def test_a_raising_hook_fails_the_run_and_the_worker_goes_on(redis_url: str) -> None:
    model = spawning({"fragile": "fragile", "plain": "general-purpose"}).on(
        lambda r: r.last_role == "user" and "fragile" in r.last_user_message,
        ToolCalls([Call("current_time", {})]),
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        async with Stack(
            values=values(redis_url, fake.base_url), adapters=[channel], workers=1
        ) as stack:
            await channel.say("fragile")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
            await channel.say("plain")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
    failed, served = (a.text for a in channel.announces)
    assert "Status: error" in failed
    assert f"hook {HOOKS}:broken failed: RuntimeError: the hook broke" in failed
    assert "Status: success" in served


async def test_an_agents_hooks_apply_to_its_own_turns(redis_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "touched.txt"

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text(f"the tool said: {req.tool_results[-1].content}")
        return ToolCalls([Call("touch", {"path": str(marker)})])

    model = ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main)
    settings = values(redis_url, "") | {"agents": {"main": {"middleware": [f"{HOOKS}.no_touch"]}}}
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        settings["openai"]["base_url"] = fake.base_url
        channel = MemoryChannel()
        async with Stack(values=settings, adapters=[channel], workers=1) as stack:
            await channel.say("touch it")
            await stack.wait_for(lambda: len(channel.replies) == 1, timeout=40)
    assert not marker.exists()
    assert channel.replies[0].text == f"the tool said: {VETO}"
