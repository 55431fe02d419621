"""What a stepping agent reports and obeys, shared by main turns and subagent runs.

The agent loop (:mod:`bot.agent.loop`) drives the model; whoever runs it (a turn, or the run
lifecycle in :mod:`bot.runs.execute`) owns a :class:`Meter` and hands it
:class:`LoopControl` hooks. Both live here, below either side, so the lifecycle never needs
the agent package to describe how it steers one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.types import Usage

Message = dict[str, Any]


def _nothing() -> None:
    return None


def _no_steering() -> list[str]:
    return []


def _ignore(_: Any) -> None:
    return None


@dataclass(kw_only=True)
class Meter:
    """Running totals of one agent run (mutable on purpose: the caller keeps it, so the
    tokens spent survive any exception that ends the run)."""

    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    tool_calls: int = 0
    last_text: str = ""
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, kw_only=True)
class LoopControl:
    """Hooks the loop calls; all optional.

    Attributes:
        checkpoint: Raises :class:`bot.errors.RunInterrupted` to end the run cleanly.
        steering: Messages to inject as user turns before the next step.
        record: Called with every message appended to the context (transcript).
        progress: Called with a short status text after each step and tool call.
        deadline: ``time.monotonic()`` value of the soft deadline.
    """

    checkpoint: Callable[[], None] = _nothing
    steering: Callable[[], list[str]] = _no_steering
    record: Callable[[Message], None] = _ignore
    progress: Callable[[str], None] = _ignore
    deadline: float | None = None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@dataclass(frozen=True, kw_only=True)
class LoopResult:
    text: str
    complete: bool
    """False when the step limit ended the loop before a final answer."""
