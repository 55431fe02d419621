"""What a stepping agent reports and obeys, shared by main turns and subagent runs.

The agent loop (:mod:`bot.agent.loop`) drives the model; whoever runs it (a turn, or the run
lifecycle in :mod:`bot.runs.execute`) owns a :class:`Meter` and hands it
:class:`LoopControl` hooks. Both live here, below either side, so the lifecycle never needs
the agent package to describe how it steers one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.types import RunRecord, Usage

Message = dict[str, Any]


def _nothing() -> None:
    return None


def _no_steering() -> list[str]:
    return []


def _ignore(_: Any) -> None:
    return None


class CallBudget(Protocol):
    """Spend limits around each model call (:mod:`bot.runs.budget` implements them)."""

    def before_call(
        self, *, model: str, messages: Sequence[Message], tools: Sequence[Message]
    ) -> str | None:
        """Reserve the call's estimate; raises :class:`bot.errors.BudgetExceeded` when a
        limit is used up. Returns a warning for the model once a limit is nearly spent."""
        ...

    def after_call(self, *, model: str, usage: Usage | None) -> None:
        """Settle the reservation to the real ``usage`` (None: the call failed)."""
        ...


class NoBudget:
    """No limits and no counting (the default)."""

    def before_call(
        self, *, model: str, messages: Sequence[Message], tools: Sequence[Message]
    ) -> str | None:
        return None

    def after_call(self, *, model: str, usage: Usage | None) -> None:
        return None


NO_BUDGET = NoBudget()


def fallback_note(answered_by: str, reason: str) -> str:
    """How a card says a fallback answered (pure; "" when none did)."""
    if not answered_by:
        return ""
    return f"answered by {answered_by}" + (f" ({reason})" if reason else "")


@dataclass(kw_only=True)
class Meter:
    """Running totals of one agent run (mutable on purpose: the caller keeps it, so the
    tokens spent survive any exception that ends the run)."""

    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    tool_calls: int = 0
    last_text: str = ""
    started: float = field(default_factory=time.monotonic)
    note: str = ""
    """A standing remark for the status card (a budget warning)."""
    last_activity: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` of the last sign of life: a model stream chunk, a tool event, a
    step (the run's stall watchdog, :mod:`bot.runs.stall`, reads it from another thread)."""
    activity: str = "started"
    """What that sign of life was, for the stall note."""
    in_tool: str = ""
    """The tool being called now ("" between calls): stalls get the tool limit meanwhile."""
    answered_by: str = ""
    """The fallback that answered the run's latest call a fallback answered ("" = none did;
    docs/models.md, "Fallbacks")."""
    fallback_reason: str = ""
    """Why the models before it did not answer (``gpt-4o overloaded``)."""
    remarks: list[str] = field(default_factory=list)
    """Lines for the run's notes beyond how it ended (a slow hook, docs/hooks.md)."""

    def answered(self, by: str, reason: str) -> None:
        """A call was answered by ``by``; a fallback (a ``reason`` given) is remembered."""
        if reason:
            self.answered_by, self.fallback_reason = by, reason

    @property
    def fallback_note(self) -> str:
        """``answered by local/qwen3 (gpt-4o overloaded)``, or "" when no fallback answered."""
        return fallback_note(self.answered_by, self.fallback_reason)

    def touch(self, activity: str, *, tool: str | None = None) -> None:
        """Record a sign of life; ``tool`` sets (a name) or clears ("") the tool in flight."""
        self.last_activity = time.monotonic()
        self.activity = activity
        if tool is not None:
            self.in_tool = tool

    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started


@dataclass(frozen=True, kw_only=True)
class LoopControl:
    """Hooks the loop calls; all optional.

    Attributes:
        checkpoint: Raises :class:`bot.errors.RunInterrupted` to end the run cleanly.
        steering: Messages to inject as user turns before the next step.
        record: Called with every message appended to the context (transcript).
        progress: Called with a short status text after each step and tool call.
        deadline: ``time.monotonic()`` value of the soft deadline.
        budget: Spend limits checked before and settled after each model call.
        wait: Told what the run waits for (the model's rate limit), ``""`` when it goes on.
    """

    checkpoint: Callable[[], None] = _nothing
    steering: Callable[[], list[str]] = _no_steering
    record: Callable[[Message], None] = _ignore
    progress: Callable[[str], None] = _ignore
    deadline: float | None = None
    budget: CallBudget = NO_BUDGET
    wait: Callable[[str], None] = _ignore

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@dataclass(frozen=True, kw_only=True)
class LoopResult:
    text: str
    complete: bool
    """False when the step limit ended the loop before a final answer."""


class RunBody(Protocol):
    """The work of a run: drive the agent until it answers (or a hook raises)."""

    def __call__(self, record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        """Run ``record``'s task, counting into ``meter`` and obeying ``control``."""
        ...
