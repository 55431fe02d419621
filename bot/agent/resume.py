"""Where an agent's step stood when its worker was lost, read from what it recorded.

A run (or a main-agent turn) records every message of its context as it happens: the
model's answer once the model call is complete, each tool result once the call returns
(:mod:`bot.agent.loop`). A process that dies therefore leaves a record that ends in one of
three places, and a new attempt goes on from there (docs/architecture.md, "Resume after a
crash"):

- after a tool result, a user message or the start: the model call in flight (if any) is
  simply made again;
- after an answer with tool calls, some of whose results are missing: the first call
  without a result was in flight. It is never silently run twice: unless its tool is
  declared safe to repeat (``Tool.repeat_safe``: ``ls``, ``read_file``, ``web_fetch``...),
  the new attempt gives the model a result saying the call was interrupted and its outcome
  is unknown, so the model decides. The calls after it never started: they run now;
- after an answer without tool calls: the agent had answered; only its ending was lost.

:func:`pending_step` is that reading (pure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.models.completion import ToolCallRequest

INTERRUPTED = (
    "error: this call was interrupted: the worker running it was lost, so its outcome is "
    "unknown (it may or may not have taken effect). Check before you repeat it."
)
"""The result an interrupted call that is not safe to repeat gets in its new attempt."""


@dataclass(frozen=True, kw_only=True)
class PendingStep:
    """What a new attempt must finish before its next model call.

    Attributes:
        interrupted: Tool messages to append first: the call in flight, not safe to repeat.
        calls: The calls to run (through the approval gate, in order): the call in flight
            when safe to repeat, then those that never started.
        answered: The record ends with the agent's answer (no tool calls): its text.
        answer_seen: Whether it did.
        repeated: The name of the call in flight that is run again ("" = none).
    """

    interrupted: tuple[dict[str, Any], ...] = ()
    calls: tuple[ToolCallRequest, ...] = ()
    answered: str = ""
    answer_seen: bool = False
    repeated: str = ""
    names: tuple[str, ...] = field(default=())
    """Names of the calls interrupted (for the log and the run's notes)."""


def pending_step(
    messages: Sequence[Mapping[str, Any]], *, repeat_safe: Callable[[str], bool]
) -> PendingStep:
    """Read the step a lost attempt left in ``messages`` (its recorded context, oldest
    first); ``repeat_safe(name)`` says whether a tool may run again (pure)."""
    last_answer = None
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            last_answer = index
            break
    if last_answer is None:
        return PendingStep()
    answer = messages[last_answer]
    calls = _calls(answer.get("tool_calls"))
    after = messages[last_answer + 1 :]
    if not calls:
        if any(m.get("role") in ("user", "tool") for m in after):
            return PendingStep()  # a steering message or a fan-in came after: go on
        return PendingStep(answered=str(answer.get("content") or ""), answer_seen=True)
    done = {str(m.get("tool_call_id")) for m in after if m.get("role") == "tool"}
    missing = [c for c in calls if c.id not in done]
    if not missing:
        return PendingStep()
    in_flight, rest = missing[0], tuple(missing[1:])
    if repeat_safe(in_flight.name):
        return PendingStep(calls=(in_flight, *rest), repeated=in_flight.name)
    note = {"role": "tool", "tool_call_id": in_flight.id, "content": INTERRUPTED}
    return PendingStep(interrupted=(note,), calls=rest, names=(in_flight.name,))


def _calls(raw: Any) -> list[ToolCallRequest]:
    """The tool calls of a recorded answer (as the chat API writes them)."""
    calls = []
    for call in raw or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        calls.append(
            ToolCallRequest(
                id=str(call.get("id") or ""),
                name=str(function.get("name") or ""),
                arguments=str(function.get("arguments") or ""),
            )
        )
    return calls


def steps_taken(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many model answers ``messages`` hold: the steps a lost attempt completed."""
    return sum(1 for m in messages if m.get("role") == "assistant")
