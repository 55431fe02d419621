"""Stopping runs and turns.

Stop, for one run: read once (:func:`read_stop`: the run, the runs of its session, the
session's fan-ins, how far each run to stop got), plan without I/O
(:func:`bot.runs.stop_plan.plan_stop`, which documents the steps), and apply the plan
(:func:`apply_stop`). The run ends ``stopped`` right away, keeping the partial result it
recorded, so the status and the announce never wait for a model call to return. A running
run's hard stop is RQ's stop command, a fire-and-forget pub/sub message, so the run also goes
into ``stops:pending`` (in the same script that ends it) and the maintenance sweep re-sends
it while the job still executes after ``subagents.hard_kill_grace_seconds``.

``/stop`` also sets the session's turn-stop flag; the executing turn job goes into
``stops:pending`` too and is hard-stopped by the sweep if the flag did not end it in time.

The run's own finalize, when its horse gets that far, is then a no-op.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.deps import Deps
from bot.runs.approval_gate import withdraw
from bot.runs.finalize import StopMarks, end_run
from bot.runs.join import JOB_PREFIX
from bot.runs.naming import Icon, run_title
from bot.runs.outfiles import out_snapshot
from bot.runs.stop_plan import StopPlan, StopState, plan_stop, to_stop
from bot.sessions import qualified_user
from bot.store.runs import OutFiles
from bot.store.stops import TURN_MEMBER
from bot.store.turn_attempts import PARKED
from bot.types import Outbound, OutboundKind, RunRecord, RunStatus

log = logging.getLogger(__name__)

GIVE_UP_AFTER_SECONDS = 600
"""Stop re-sending hard stops for a run this long after it ended (the job is stuck elsewhere)."""


CASCADE_GRACE_SECONDS = 10.0
"""How long the maintenance sweep leaves a stopped run's children to the stop's cascade
(which names the parent in their notes) before it stops them as orphans itself."""


@dataclass(frozen=True, kw_only=True)
class StopResult:
    """What stopping one run did.

    Attributes:
        run_id: The run.
        was: Its status before the stop.
        ended: True if this stop made the terminal transition.
        hard_stop_sent: True if a stop command went to the worker executing it.
    """

    run_id: str
    was: RunStatus
    ended: bool = False
    hard_stop_sent: bool = False


def stop_run(
    deps: Deps,
    run_id: str,
    *,
    by: str,
    record: RunRecord | None = None,
    family: Sequence[RunRecord] | None = None,
) -> StopResult:
    """Stop ``run_id`` (see the module docstring); ``by`` names who asked, for the notes.

    ``record``: the run as the caller just read it, and ``family``: the runs of its session
    (its children are among them); given, they are not read again.
    """
    state = read_stop(deps, run_id, record=record, family=family)
    plan = plan_stop(state, run_id=run_id, by=by, now=time.time())
    return apply_stop(deps, plan, seen=state.seen)


def read_stop(
    deps: Deps,
    run_id: str,
    *,
    record: RunRecord | None = None,
    family: Sequence[RunRecord] | None = None,
) -> StopState:
    """Everything :func:`~bot.runs.stop_plan.plan_stop` needs, read once.

    A run that announces (not a child) is read again with its ``out/`` files, in one round
    trip, even when given: ending it would otherwise read them in two before it writes.
    """
    seen: OutFiles | None = None
    if record is None or record.depth <= 1:
        record, seen = deps.runs.get_for_end(run_id, out_snapshot())
    if record is None or record.status.terminal:
        return StopState(run=record)
    runs = tuple(family if family is not None else deps.runs.session_runs(record.session_key))
    steps = {
        r.session_id: deps.transcripts.length(r.session_id)
        for r in to_stop(record, runs)
        if r.status is not RunStatus.QUEUED and r.started_at is not None
    }
    joins = tuple(deps.joins.of_session(record.session_key))
    return StopState(run=record, family=runs, joins=joins, steps=steps, seen=seen)


def apply_stop(deps: Deps, plan: StopPlan, *, seen: OutFiles | None = None) -> StopResult:
    """Perform ``plan``, then its children's plans; returns what stopping the run did.

    ``seen``: the run's ``out/`` files as :func:`read_stop` read them with it.
    """
    record = plan.run
    if record is None:
        return StopResult(run_id=plan.run_id, was=plan.was)
    started = bool(plan.cancel_job) and deps.jobs.cancel_queued(plan.cancel_job)
    hard = plan.hard_stop or started
    grace = deps.settings.subagents.hard_kill_grace_seconds
    marks = StopMarks(recheck_at=time.time() + grace if hard else None)
    ended = end_run(deps, record, status=RunStatus.STOPPED, notes=plan.notes, stop=marks, seen=seen)
    if plan.withdraw_approval:
        withdraw(deps, plan.withdraw_approval)  # its request must not wait for a decision
    for job_id in plan.cancel_jobs:
        deps.jobs.cancel_queued(job_id)  # decided, waiting a slot
    sent = deps.jobs.send_stop(record.executing_job) if hard else False
    log.info("run %s: %s (ended=%s, hard stop=%s)", record.run_id, plan.notes, ended, sent)
    for join_id in plan.cancel_joins:
        deps.joins.cancel(join_id)
        deps.jobs.cancel_queued(JOB_PREFIX + join_id)  # fired, its resume waits a slot
    for child in plan.children:
        apply_stop(deps, child)
    return StopResult(run_id=record.run_id, was=plan.was, ended=ended, hard_stop_sent=sent)


def stop_orphans(deps: Deps) -> list[RunRecord]:
    """Maintenance: stop unfinished runs whose parent ended (it died, or a spawn raced its
    stop), and tell the thread when the parent did not end by a stop; returns them."""
    stopped: list[RunRecord] = []
    for record in deps.runs.get_many(sorted(deps.runs.active_ids())):
        if not record.parent_run_id or record.status.terminal:
            continue
        parent = deps.runs.get(record.parent_run_id)
        if parent is not None and not parent.status.terminal:
            continue
        if parent is not None and _cascading(parent, now=time.time()):
            continue  # the stop that ended it is stopping its children, with its own note
        why = parent.status.value if parent is not None else "gone"
        by = f"fanbot (its parent ended: {why})"
        if stop_run(deps, record.run_id, by=by, record=record).ended:
            stopped.append(record)
            if parent is None or parent.status is not RunStatus.STOPPED:
                _tell_orphaned(deps, record, parent)
    return stopped


def _cascading(parent: RunRecord, *, now: float) -> bool:
    """``parent`` was stopped so recently that its stop is still stopping its children."""
    ended = parent.ended_at
    return (
        parent.status is RunStatus.STOPPED
        and ended is not None
        and now - ended < CASCADE_GRACE_SECONDS
    )


def _tell_orphaned(deps: Deps, record: RunRecord, parent: RunRecord | None) -> None:
    ended = (
        f"{run_title(parent, noun='', name='none')} ended {parent.status.value}"
        if parent
        else "is gone"
    )
    text = f"{Icon.STOPPED} Stopped {run_title(record, noun='subagent')}: its parent {ended}."
    notice = Outbound(
        thread=record.thread,
        text=text,
        kind=OutboundKind.REPLY,
        idempotency_key=f"orphan:{record.run_id}",
    )
    deps.outbox.put(notice)


def resend_hard_stops(deps: Deps, *, now: float | None = None) -> list[str]:
    """Maintenance: re-send the stop of runs and turns whose job still executes after the
    grace; returns the ``stops:pending`` members it re-sent."""
    now = now or time.time()
    grace = deps.settings.subagents.hard_kill_grace_seconds
    resent: list[str] = []
    for member in deps.stops.due(now=now):
        job_id = _pending_job(deps, member, now)
        if job_id is None or not deps.jobs.is_executing(job_id):
            deps.stops.done(member)
            continue
        log.warning("job %s still executes after its stop; (re-)sending the stop", job_id)
        deps.jobs.send_stop(job_id)
        deps.stops.postpone(member, at=now + max(grace, 0.5))
        resent.append(member)
    return resent


def _pending_job(deps: Deps, member: str, now: float) -> str | None:
    """The job to re-check for a ``stops:pending`` member; None once it is not worth it."""
    if member.startswith(TURN_MEMBER):
        return member.removeprefix(TURN_MEMBER)
    record = deps.runs.get(member)
    if record is None:
        return None
    if now - (record.ended_at or now) > GIVE_UP_AFTER_SECONDS:
        log.warning("run %s: its job still executes long after the stop; giving up", member)
        return None
    return record.executing_job


@dataclass(frozen=True, kw_only=True)
class TurnInfo:
    """The session's main-agent turn in progress: its job (or the approval it is parked
    on) and whose message it answers."""

    job_id: str | None
    owner: str
    approval_id: str = ""


def running_turn(deps: Deps, session_key: str) -> TurnInfo | None:
    """The session's executing turn, else its turn parked for an approval, if any."""
    for job_id, payload in deps.jobs.started_turns():
        if payload.get("session_key") == session_key:
            return TurnInfo(job_id=job_id, owner=_owner(payload))
    for entry in deps.turn_attempts.in_flight():
        if entry.state == PARKED and entry.payload.get("session_key") == session_key:
            return TurnInfo(job_id=None, owner=_owner(entry.payload), approval_id=entry.approval)
    return None


def _owner(payload: Mapping[str, object]) -> str:
    return qualified_user(str(payload.get("platform")), str(payload.get("sender_id")))


def stop_turn(
    deps: Deps, session_key: str, *, job_id: str | None = None, approval_id: str = ""
) -> None:
    """Ask the session's running turn to end at its next step (it answers "Stopped.").

    A turn blocked in a long model call never reaches its next step, so ``job_id`` (the
    executing turn) also goes into ``stops:pending``: the sweep hard-stops it if it still
    executes after the grace. A turn parked on ``approval_id`` has no job: its request is
    withdrawn, which queues its resume job, and that job sees the stop and answers
    "Stopped." (docs/architecture.md, "Approvals: one gate").
    """
    deps.stops.stop_turn(session_key, ttl=deps.settings.turn_timeout_seconds)
    if approval_id:
        withdraw(deps, approval_id)
    if job_id:
        due = time.time() + deps.settings.subagents.hard_kill_grace_seconds
        deps.stops.recheck_turn(job_id, at=due)
