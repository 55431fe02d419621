"""What the console's threads have in flight, what to say about it, and stopping it all.

The console is one person on one machine: Ctrl-C means "stop what I started", so each
unfinished run is stopped the way ``/subagents stop`` stops it (``stopped``, partial
result, an announce), and the turn being answered is hard-stopped. Runs are read from the
run hashes (the source of truth), never from the workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bot.deps import Deps
from bot.runs.join import cancel_joins
from bot.runs.stop import running_turn, stop_run, stop_turn
from bot.runs.turn_state import TurnState, turn_state
from bot.types import RunRecord, RunStatus


@dataclass(frozen=True, kw_only=True)
class InFlight:
    """A snapshot of the console's unfinished work.

    Attributes:
        runs: Unfinished runs of the console's sessions, oldest first.
        roots: Run id -> the console session it reports to (its own, or its parent's).
        turns: Session keys with a main-agent turn queued or executing, or a fan-in whose
            continuation turn is still to come.
        line: Job ids of every run waiting to start, in the order they will start.
        states: Session key -> what its main agent is doing (thinking or waiting for its
            subagents), for the keys in ``turns``.
    """

    runs: tuple[RunRecord, ...] = ()
    roots: Mapping[str, str] = field(default_factory=dict)
    turns: frozenset[str] = field(default_factory=frozenset)
    line: tuple[str, ...] = ()
    states: Mapping[str, TurnState] = field(default_factory=dict)

    @property
    def idle(self) -> bool:
        return not self.runs and not self.turns


def ours(active: Iterable[RunRecord], session_keys: Iterable[str]) -> dict[str, str]:
    """Run id -> the console session it belongs to, for the unfinished runs spawned from
    ``session_keys`` or, nested, from one of those runs (with a shared Redis, other
    processes' runs are not the console's to show or stop)."""
    pending = [r for r in active if not r.status.terminal]
    root_of_session = {key: key for key in session_keys}
    found: dict[str, str] = {}
    while new := [r for r in pending if r.session_key in root_of_session and r.run_id not in found]:
        for r in new:
            found[r.run_id] = root = root_of_session[r.session_key]
            root_of_session[r.child_session_key] = root
    return found


def in_flight(deps: Deps, session_keys: Iterable[str]) -> InFlight:
    """Read the snapshot (sync: a few Redis reads)."""
    keys = set(session_keys)
    active = deps.runs.get_many(sorted(deps.runs.active_ids()))
    roots = ours(active, keys)
    runs = sorted((r for r in active if r.run_id in roots), key=lambda r: (r.created_at, r.seq))
    # A fan-in not yet continued is an answer still to come.
    states = {k: state for k in sorted(keys) if (state := turn_state(deps, k)) is not None}
    turns = frozenset(states)
    waiting = any(r.status is RunStatus.QUEUED for r in runs)
    line = tuple(deps.jobs.subagent_line()) if waiting else ()
    return InFlight(runs=tuple(runs), roots=roots, turns=turns, line=line, states=states)


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def stopping_line(snapshot: InFlight) -> str:
    """What Ctrl-C is about to do, in one line (pure)."""
    parts = []
    if snapshot.turns:
        parts.append("fanbot's answer")
    if snapshot.runs:
        parts.append(_runs(len(snapshot.runs)))
    doing = f"Stopping {', '.join(parts)} and the workers" if parts else "Stopping the workers"
    return f"{doing}… (Ctrl-C again to force)"


def waiting_line(snapshot: InFlight) -> str | None:
    """What Ctrl-D waits for, in one line; ``None`` when nothing is in flight (pure)."""
    if snapshot.idle:
        return None
    them = "it" if len(snapshot.runs) + len(snapshot.turns) == 1 else "them"
    if snapshot.runs and snapshot.turns:
        what = f"fanbot's answer and {_runs(len(snapshot.runs))}"
    elif snapshot.runs:
        what = f"{_runs(len(snapshot.runs))} to finish"
    else:
        what = "fanbot's answer"
    return f"Waiting for {what}… Ctrl-C to stop {them}"


def stop_in_flight(deps: Deps, snapshot: InFlight, *, by: str) -> int:
    """Stop every run in ``snapshot`` (each announces ``stopped``) and hard-stop the turns
    being answered (the console is quitting: no step boundary is worth waiting for).

    Returns:
        How many runs this call ended.
    """
    for session_key in sorted({*snapshot.turns, *(r.session_key for r in snapshot.runs)}):
        cancel_joins(deps, session_key, [r for r in snapshot.runs if r.session_key == session_key])
    ended = sum(stop_run(deps, r.run_id, by=by).ended for r in snapshot.runs)
    for session_key in snapshot.turns:
        turn = running_turn(deps, session_key)
        if turn is None:
            stop_turn(deps, session_key)
            continue
        stop_turn(deps, session_key, job_id=turn.job_id, approval_id=turn.approval_id)
        if turn.job_id is not None:
            deps.jobs.send_stop(turn.job_id)
    return ended
