"""The scripted model of the approval tests: the main agent spawns one subagent that asks
for ``calculate`` once (a tool that needs approval there) and answers with its result."""

from __future__ import annotations

from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent


def main_agent(request: ChatRequest) -> Reply:
    if request.last_role == "tool":
        return Text("Started.")
    return ToolCalls([Call("sessions_spawn", {"task": "compute 6*7", "label": "calc"})])


def subagent(request: ChatRequest) -> Reply:
    """Asks for ``calculate`` once; then answers with what the tool said."""
    last = request.messages[-1]
    if last.get("role") == "tool":
        return Text(f"answer: {last.get('content')}")
    return ToolCalls([Call("calculate", {"expression": "6*7"})])


def model() -> ScriptedModel:
    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main_agent)
        .on(_is_subagent, subagent)
    )
