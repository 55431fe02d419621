"""The scripted model of the thread-bound child tests: the child's first step waits until
the test let it go (so a person's message reaches it while it runs); its answer quotes the
steering it read. The main agent answers plainly (after ``/subagents close``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field

from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent

STEER = "STEER: look at the API first"
TASK = "survey the docs"


@dataclass
class Gate:
    """The test's hold on the child: ``started`` once it asked the model, ``go`` to answer."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)


def model(gate: Gate) -> ScriptedModel:
    async def first_step() -> Reply:
        gate.started.set()
        await gate.go.wait()
        return ToolCalls([Call("calculate", {"expression": "6*7"})])

    def subagent(request: ChatRequest) -> Reply | Awaitable[Reply]:
        steered = [m for m in request.messages if STEER in str(m.get("content", ""))]
        if steered:
            return Text(f"final: read {STEER!r}")
        if request.messages[-1].get("role") == "tool":
            return Text("final: nobody steered me")
        return first_step()

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), Text("main agent here"))
        .on(_is_subagent, subagent)
    )
