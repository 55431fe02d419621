"""What a hook receives: one event object per hook point (docs/hooks.md).

Every event says whose work it is (:class:`Event`'s fields). The fields a hook may change
say so; a change to any other field is ignored. A hook returns None, or a :class:`Veto`
for a :class:`ToolCall` (raising it works the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Event",
    "FanIn",
    "FanInResult",
    "ModelCall",
    "ModelReply",
    "RunEnd",
    "ToolCall",
    "ToolResult",
    "Veto",
]


class Veto(Exception):
    """Refuse a tool call: ``raise Veto("why")`` (or return it) from a hook given a
    :class:`ToolCall`. The call does not run; the model gets the tool result
    ``error: vetoed by <hook>: why`` and the run goes on. At any other hook point a veto
    fails the run like any exception.

    Args:
        reason: Why, for the model.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(kw_only=True)
class Event:
    """Whose work an event is about (read-only).

    Attributes:
        run_id: The subagent run; None in a main-agent turn.
        session_key: The session the agent serves (a run's child session, a turn's thread).
        agent_id: The agent (``main`` unless ``FANBOT_AGENTS`` names others).
        type_name: The run's subagent type; None in a main-agent turn.
        requester: ``platform:user_id`` of the person whose message started the work.
    """

    run_id: str | None
    session_key: str
    agent_id: str
    type_name: str | None
    requester: str


@dataclass(kw_only=True)
class ModelCall(Event):
    """Before each model call of the tool loop.

    Attributes:
        model: The model asked (``endpoint/model`` or a bare name).
        messages: A copy of the conversation to send, OpenAI-style dicts. **May change**
            (in place or replaced): what is sent is what the hooks leave here; the stored
            conversation and transcript keep the original.
        tools: The names of the tools offered.
    """

    model: str
    messages: list[dict[str, Any]]
    tools: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class ModelReply(Event):
    """After each model call, before its answer joins the conversation.

    Attributes:
        model: The model that answered.
        text: The answer's text. **May change**: the conversation, the transcript and (for
            the last answer) the result keep what the hooks leave.
        tool_calls: The calls it asks for, as ``(name, arguments JSON)`` pairs.
    """

    model: str
    text: str
    tool_calls: list[tuple[str, str]] = field(default_factory=list)


@dataclass(kw_only=True)
class ToolCall(Event):
    """Before a tool call runs (after its approval, when it needed one).

    Attributes:
        tool: The tool's name.
        arguments: The arguments as the model sent them (a JSON object's text). **May
            change** (the call runs with what the hooks leave).
        call_id: The model's id of the call.

    Veto it with ``raise Veto("why")`` (or ``return Veto("why")``).
    """

    tool: str
    arguments: str
    call_id: str


@dataclass(kw_only=True)
class ToolResult(Event):
    """After a tool call ran, before the model or the transcript sees its result.

    Attributes:
        tool: The tool's name.
        arguments: The arguments it ran with.
        call_id: The model's id of the call.
        result: The result text (``error: …`` when the tool failed). **May change**:
            redact here.
    """

    tool: str
    arguments: str
    call_id: str
    result: str


@dataclass(kw_only=True)
class RunEnd(Event):
    """A subagent run's worker ends it, before its announce.

    Attributes:
        status: ``success``, ``error``, ``timeout`` or ``stopped``.
        result: Its result text. **May change** (the announce and the requester's
            history note get what the hooks leave).
        notes: Its notes (why it failed, a partial result...).
    """

    status: str
    result: str
    notes: str


@dataclass(kw_only=True)
class FanInResult:
    """One ended run in a :class:`FanIn`.

    Attributes:
        run_id: The run.
        number: Its number in its thread (``#2``).
        label: Its label, else its task.
        type_name: Its subagent type.
        status: How it ended.
        result: Its result text. **May change**.
    """

    run_id: str
    number: int
    label: str
    type_name: str
    status: str
    result: str


@dataclass(kw_only=True)
class FanIn(Event):
    """Every run a turn (or an orchestrator run) waited for has ended: their results are
    about to be written into the continuation's prompt. The event's identity is the
    waiting agent's (``run_id`` is the orchestrator's, None for a main-agent turn).

    Attributes:
        results: One entry per run, in spawn order. **May change**: an entry's
            ``result``, or the list itself (a run removed from it is not in the prompt;
            entries of runs not in the fan-in are ignored).
    """

    results: list[FanInResult]
