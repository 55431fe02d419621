"""The offline demo model behind ``fanbot console`` when no model endpoint is configured.

A deterministic script (see :mod:`bot.demo.replies`): it greets short messages, fans
anything bigger out to three subagents, and has each subagent answer a canned markdown
result, so a newcomer sees spawn → progress → announce with zero setup.
"""

from __future__ import annotations

from bot.demo.replies import Call, ChatRequest, Reply, Script, Text, ToolCalls

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


def _main_agent(request: ChatRequest) -> Reply:
    if request.is_continuation:
        return _synthesis(request)
    if request.last_role == "tool":
        started = 0
        for message in reversed(request.messages):
            if message.get("role") != "tool":
                break
            started += 1
        noun = "subagent" if started == 1 else "subagents"
        return Text(f"Started {started} {noun}; I'll combine their results when they're done.")
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


def _subagent(request: ChatRequest, delay: float) -> Reply:
    if request.has_tool("current_time") and not request.tool_results:
        return ToolCalls([Call("current_time", {})])
    task = " ".join(request.last_user_message.split()) or "(no task)"
    times = [r.content for r in request.tool_results if r.name == "current_time"]
    lines = [
        f"**Result** for: {task}",
        "",
        "- Scope: summarised the request into three concrete points.",
        "- Finding: the main trade-off is speed of delivery versus robustness.",
        "- Next step: run `fanbot subagents list` to see every run of this thread.",
    ]
    if times:
        lines.append(f"- Checked the clock: {times[-1]}")
    lines += ["", "_(offline demo model — connect a real model for real answers)_"]
    return Text("\n".join(lines), delay=delay)


def demo_model(*, subagent_delay: float = 1.5) -> Script:
    """The deterministic offline model, as a script for :class:`~bot.demo.chat_server.ChatServer`.

    Main agent (offered ``sessions_spawn``): greets short messages; otherwise spawns three
    subagents (Research, Outline, Review) in one response, then confirms once the tool
    results are in. Subagents (never offered ``sessions_spawn``) call ``current_time`` if
    offered, then answer a short markdown result about their task after
    ``subagent_delay`` seconds.
    """

    def answer(request: ChatRequest) -> Reply:
        if request.has_tool("sessions_spawn"):
            return _main_agent(request)
        return _subagent(request, subagent_delay)

    return answer
