"""The offline demo model behind ``fanbot console`` when no model endpoint is configured.

A deterministic script (see :mod:`bot.demo.replies`): it greets short messages, fans
anything bigger out to three subagents, and has each subagent answer a canned markdown
result, so a newcomer sees spawn → progress → announce with zero setup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bot.demo.replies import Call, ChatRequest, Reply, Script, Text, ToolCalls

DEMO_MODEL = "offline-demo"
"""The model name the console gives the demo model: what cards, ``/subagents info`` and
``/context`` show for its runs (no price is known for it, so no cost is made up)."""
SUBAGENTS_HINT = "fanbot subagents list --all"
"""The command a demo result suggests to see the runs from another shell."""
SPAWNED = frozenset({"accepted", "waiting_for_approval"})
"""The ``sessions_spawn`` answers that made a run (bot.agent.turn counts the same)."""
_GREETINGS = frozenset({"hi", "hello", "hey", "help", "hallo", "yo", "start"})
_DEMO_ROLES = (
    ("Research", "Research the key facts, options and trade-offs for: {topic}"),
    ("Outline", "Draft a short, structured outline answering: {topic}"),
    ("Review", "List the risks, open questions and pitfalls of: {topic}"),
)


def _is_greeting(text: str) -> bool:
    words = [w.strip("!?.,:;") for w in text.lower().split()]
    if len(text) < 12 or " ".join(words) in _GREETINGS:
        return True
    return bool(words) and words[0] in _GREETINGS - {"help"} and len(words) <= 4


def _topic(request: ChatRequest) -> str:
    """The last user message without the ``speaker: `` prefix a fanbot turn puts on it."""
    text = " ".join(request.last_user_message.split())
    speaker, colon, said = text.partition(": ")
    return said if colon and speaker and " " not in speaker else text


def _synthesis(request: ChatRequest) -> Reply:
    """The continuation after the fan-in: one answer from every run's result."""
    ended = [
        line.removeprefix("- ")
        for line in request.last_user_message.splitlines()
        if line.startswith("- Subagent #")
    ]
    lines = [
        "**All subagents are done.** Here is the combined answer:",
        "",
        *(f"- {line}" for line in ended),
        "",
        "The research, outline and review agree: start small, measure, then harden.",
        "_(offline demo model — connect a real model for real answers)_",
    ]
    return Text("\n".join(lines))


def _labels(request: ChatRequest) -> dict[str, str]:
    """Tool call id -> the label its ``sessions_spawn`` call gave."""
    labels: dict[str, str] = {}
    for message in request.messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            try:
                arguments = json.loads(str(function.get("arguments") or "{}"))
            except ValueError:
                arguments = {}
            label = arguments.get("label") if isinstance(arguments, Mapping) else None
            labels[str(call.get("id", ""))] = str(label or "subagent")
    return labels


def _spawned(content: str) -> bool:
    try:
        answer: Any = json.loads(content)
    except ValueError:
        return False
    return isinstance(answer, Mapping) and answer.get("status") in SPAWNED


def spawn_summary(request: ChatRequest) -> str:
    """The main agent's line after its spawns: the runs started, and each refused spawn
    with the reason its tool result gave (a refused spawn is no run)."""
    results = []
    for message in reversed(request.messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    results.reverse()
    labels = _labels(request)
    started = 0
    refused: list[str] = []
    for message in results:
        content = str(message.get("content") or "")
        if _spawned(content):
            started += 1
            continue
        label = labels.get(str(message.get("tool_call_id", "")), "subagent")
        refused.append(f"- {label}: {content.removeprefix('error: ').strip()}")
    noun = "subagent" if started == 1 else "subagents"
    if not refused:
        return f"Started {started} {noun}; I'll combine their results when they're done."
    if started:
        head = f"Started {started} {noun}; {len(refused)} refused:"
    else:
        head = f"No subagent started: {'the spawn was' if len(refused) == 1 else 'all'} refused:"
    return "\n".join([head, *refused])


def _main_agent(request: ChatRequest) -> Reply:
    if request.is_continuation:
        return _synthesis(request)
    if request.last_role == "tool":
        return Text(spawn_summary(request))
    topic = _topic(request)
    if _is_greeting(topic):
        return Text(
            "Hi! I'm fanbot running the **offline demo model** (no LLM endpoint configured). "
            "Ask me for something bigger, e.g. *compare Redis streams and Kafka for an "
            "outbox*, and I'll fan the work out to three subagents that report back here."
        )
    calls = [
        Call(
            "sessions_spawn", {"task": task.format(topic=topic), "label": label, "cleanup": "keep"}
        )
        for label, task in _DEMO_ROLES
    ]
    return ToolCalls(calls, content=None)


def _subagent(request: ChatRequest, delay: float, hint: str) -> Reply:
    task = " ".join(request.last_user_message.split()) or "(no task)"
    if request.has_tool("current_time") and not request.tool_results:
        # Its first step says something: a run stopped from here on ends with it as its
        # partial result.
        draft = (
            f"**Draft** for: {task}\n\n- Scope: three concrete points (checking the clock next)."
        )
        return ToolCalls([Call("current_time", {})], content=draft)
    times = [r.content for r in request.tool_results if r.name == "current_time"]
    lines = [
        f"**Result** for: {task}",
        "",
        "- Scope: summarised the request into three concrete points.",
        "- Finding: the main trade-off is speed of delivery versus robustness.",
        f"- Next step: type `/subagents list` here, or run `{hint}` in another shell, "
        "to see the runs.",
    ]
    if times:
        lines.append(f"- Checked the clock: {times[-1]}")
    lines += ["", "_(offline demo model — connect a real model for real answers)_"]
    return Text("\n".join(lines), delay=delay)


def demo_model(*, subagent_delay: float = 1.5, subagents_hint: str = SUBAGENTS_HINT) -> Script:
    """The deterministic offline model, as a script for :class:`~bot.demo.chat_server.ChatServer`.

    Main agent (offered ``sessions_spawn``): greets short messages; otherwise spawns three
    subagents (Research, Outline, Review) in one response, then says how many started and
    why any spawn was refused (:func:`spawn_summary`). Subagents (never offered ``sessions_spawn``) call ``current_time`` if
    offered, then answer a short markdown result about their task after
    ``subagent_delay`` seconds. ``subagents_hint``: the shell command its results suggest
    (the console names its own Redis in it).
    """

    def answer(request: ChatRequest) -> Reply:
        if request.has_tool("sessions_spawn"):
            return _main_agent(request)
        return _subagent(request, subagent_delay, subagents_hint)

    return answer
