"""What a session's main agent is doing between a person's message and its answer: thinking
(a turn queued or running, or a fan-in's continuation on its way) or waiting for its
subagents (its turn ended and its fan-in still has runs to end, docs/architecture.md
"Fan-in"). Decided here once; each platform that shows a turn's status renders it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.deps import Deps
from bot.store.joins import JoinRecord


@dataclass(frozen=True, kw_only=True)
class TurnState:
    """One session's main agent, while an answer is still to come.

    Attributes:
        waiting_for: The runs (ids, sorted) its fan-ins wait for while no turn of the session
            is queued or running; empty: it is thinking (calling the model or about to).
    """

    waiting_for: tuple[str, ...] = ()

    @property
    def thinking(self) -> bool:
        return not self.waiting_for


THINKING = TurnState()


def decide(turns: int, joins: Iterable[JoinRecord]) -> TurnState | None:
    """The state of a session with ``turns`` turns queued or running and ``joins`` (its
    fan-ins that may still lead to a continuation); ``None``: no answer is to come (pure).

    A turn in flight is thinking, even with runs pending (it calls the model). Without one,
    a join whose runs have all ended is about to continue (thinking); otherwise the agent
    waits for the runs still pending.
    """
    live = [j for j in joins if j.state in ("open", "sealed", "fired")]
    if turns:
        return THINKING
    if not live:
        return None
    pending = sorted({run_id for j in live for run_id in j.pending})
    if not pending or any(j.state == "fired" for j in live):
        return THINKING
    return TurnState(waiting_for=tuple(pending))


def turn_state(deps: Deps, session_key: str) -> TurnState | None:
    """Read and decide (sync: a few Redis reads)."""
    turns = deps.jobs.turns_in_flight(session_key)
    if turns:
        return THINKING
    joins = (deps.joins.get(j) for j in deps.joins.of_session(session_key))
    return decide(0, [j for j in joins if j is not None])
