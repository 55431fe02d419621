"""What stopping a run does, decided without I/O (:func:`plan_stop`).

The stop (:mod:`bot.runs.stop`) reads once (the run, the runs of its session, the
session's fan-ins and how far each started run got), asks :func:`plan_stop` and applies
the :class:`StopPlan` it gets. Every branch here is table-tested without Redis.

For one run that has not ended, the plan says:

1. queued: cancel its job first (if the job turns out to have started meanwhile, it is
   hard-stopped like a running run's);
2. end it ``stopped`` with a note naming who stopped it and how far it got; the same
   script raises its stop flag (the run checks it between steps; RQ's callbacks read it);
3. parked on an approval: withdraw the request, and cancel the resume job a decision
   may have queued already;
4. running and not parked: hard-stop its job after the grace (``stops:pending``);
5. cascade: cancel the fan-ins it opened (and their queued resume jobs), then stop each of
   its unfinished children the same way, naming the parent in their notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bot.runs.approval_gate import RESUME_PREFIX
from bot.runs.naming import run_title
from bot.store.runs import OutFiles
from bot.text import units
from bot.types import RunRecord, RunStatus


@dataclass(frozen=True, kw_only=True)
class StopState:
    """What a stop read, once.

    Attributes:
        run: The run to stop (None: there is no such run).
        family: The runs of its session (its descendants live there).
        joins: The fan-ins of its session.
        steps: Transcript messages per session id, for the runs that started.
        seen: The run's ``out/`` files, read with it for its announce (None: not read;
            ending it reads them).
    """

    run: RunRecord | None
    family: tuple[RunRecord, ...] = ()
    joins: tuple[str, ...] = ()
    steps: Mapping[str, int] = field(default_factory=dict)
    seen: OutFiles | None = None


@dataclass(frozen=True, kw_only=True)
class StopPlan:
    """What to do to stop one run (see the module docstring).

    Attributes:
        run_id: The run.
        was: Its status as read.
        run: The run as read, to end (None: nothing to end: gone or ended already).
        notes: The announce's Notes.
        cancel_job: A queued run's job, cancelled before the run ends.
        hard_stop: Its job executes: hard-stop it (re-checked after the grace).
        withdraw_approval: The approval request it waits for, withdrawn.
        cancel_jobs: Queued jobs to cancel after it ended (a decided approval's resume).
        cancel_joins: The fan-ins it opened (and each one's continuation job, if queued).
        children: Its unfinished children's plans, applied after its own.
    """

    run_id: str
    was: RunStatus
    run: RunRecord | None = None
    notes: str = ""
    cancel_job: str = ""
    hard_stop: bool = False
    withdraw_approval: str = ""
    cancel_jobs: tuple[str, ...] = ()
    cancel_joins: tuple[str, ...] = ()
    children: tuple[StopPlan, ...] = ()


def plan_stop(state: StopState, *, run_id: str, by: str, now: float) -> StopPlan:
    """The plan for stopping ``run_id`` (pure); ``by`` names who asked."""
    record = state.run
    if record is None:
        return StopPlan(run_id=run_id, was=RunStatus.UNKNOWN)
    return _plan(record, state, by=by, now=now)


def _plan(record: RunRecord, state: StopState, *, by: str, now: float) -> StopPlan:
    if record.status.terminal:
        return StopPlan(run_id=record.run_id, was=record.status)
    parked = record.parked_at is not None
    waits = parked and bool(record.approval_id)
    child_by = f"{by} (its parent {run_title(record, noun='', name='none')} was stopped)"
    joins = tuple(j for j in state.joins if j.startswith(f"{record.run_id}-"))
    return StopPlan(
        run_id=record.run_id,
        was=record.status,
        run=record,
        notes=stop_note(record, by=by, steps=state.steps.get(record.session_id, 0), now=now),
        cancel_job=record.job_id if record.status is RunStatus.QUEUED else "",
        hard_stop=record.status is RunStatus.RUNNING and not parked,
        withdraw_approval=record.approval_id if waits else "",
        cancel_jobs=(RESUME_PREFIX + record.approval_id,) if waits else (),
        cancel_joins=joins,
        children=tuple(
            _plan(child, state, by=child_by, now=now)
            for child in unfinished_children(state, record)
        ),
    )


def unfinished_children(state: StopState, record: RunRecord) -> list[RunRecord]:
    """``record``'s children in ``state.family`` that have not ended."""
    return [
        r
        for r in state.family
        if r.parent_run_id == record.run_id and r.run_id != record.run_id and not r.status.terminal
    ]


def to_stop(record: RunRecord, family: tuple[RunRecord, ...]) -> list[RunRecord]:
    """``record`` and its unfinished descendants: the runs a stop ends (pure)."""
    state = StopState(run=record, family=family)
    found, todo = [], [record]
    while todo:
        run = todo.pop()
        if run.status.terminal or run in found:
            continue
        found.append(run)
        todo.extend(unfinished_children(state, run))
    return found


def stop_note(record: RunRecord, *, by: str, steps: int, now: float) -> str:
    """The announce's Notes for a stop: who, and how far the run had got (``steps``:
    its transcript's length)."""
    if record.status is RunStatus.QUEUED or record.started_at is None:
        return f"stopped by {by} before it started"
    ran = units.duration(now - record.started_at)
    tokens = ("~" if record.usage.estimated else "") + units.tokens(record.usage.total)
    progress = f"{steps} transcript message(s), {tokens} tokens so far"
    partial = "; the result is partial" if record.result.strip() else ""
    return f"stopped by {by} after {ran} ({progress}){partial}"
