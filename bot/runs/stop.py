"""Stopping runs and turns (DESIGN §8).

Stop, for one run:

1. queued: cancel the RQ job first, and take the run out of its session's line for a slot
   (:mod:`bot.store.fair`); a run that already held a slot frees it at its finalize, which
   admits the next waiting run;
2. finalize ``stopped`` right away, keeping the partial result the run recorded, so the
   status and the announce never wait for a model call to return (and name who stopped it);
3. set its stop flag (the run checks it between steps, and RQ's callbacks read it);
4. running (or started meanwhile): hard-stop the work horse with RQ's stop command. That
   is a fire-and-forget pub/sub message, so the run also goes into ``stops:pending`` and
   the maintenance sweep re-sends it while the job still executes after
   ``subagents.hard_kill_grace_seconds``.

``/stop`` also sets the session's turn-stop flag; the executing turn job goes into
``stops:pending`` too and is hard-stopped by the sweep if the flag did not end it in time.

The run's own finalize, when its horse gets that far, is then a no-op.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from bot.deps import Deps
from bot.runs.approval_gate import RESUME_PREFIX, withdraw
from bot.runs.finalize import finalize_run
from bot.runs.join import JOB_PREFIX
from bot.runs.naming import Icon, run_title
from bot.sessions import qualified_user
from bot.store.stops import TURN_MEMBER
from bot.text import units
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


def stop_run(deps: Deps, run_id: str, *, by: str) -> StopResult:
    """Stop ``run_id`` (see the module docstring); ``by`` names who asked, for the notes."""
    record = deps.runs.get(run_id)
    if record is None:
        return StopResult(run_id=run_id, was=RunStatus.UNKNOWN)
    if record.status.terminal:
        return StopResult(run_id=run_id, was=record.status)
    executing = record.status is RunStatus.RUNNING
    if not executing:
        executing = deps.jobs.cancel_queued(record.job_id)
    # Finalize before raising the flag: a run that sees the flag at a step boundary would
    # otherwise end itself first, with a note that does not say who stopped it.
    ended = finalize_run(
        deps, run_id, status=RunStatus.STOPPED, result=None, notes=stop_note(deps, record, by)
    )
    deps.runs.request_stop(run_id)
    if record.parked_at is not None and record.approval_id:
        withdraw(deps, record.approval_id)  # its request must not wait for a decision
        deps.jobs.cancel_queued(RESUME_PREFIX + record.approval_id)  # decided, waiting a slot
    sent = _hard_stop(deps, record) if executing and record.parked_at is None else False
    log.info("run %s stopped by %s (ended=%s, hard stop=%s)", run_id, by, ended, sent)
    _stop_children(deps, record, by=by)
    return StopResult(run_id=run_id, was=record.status, ended=ended, hard_stop_sent=sent)


def children_of(deps: Deps, record: RunRecord) -> list[RunRecord]:
    """The runs ``record`` spawned (they live in its requester session)."""
    return [
        r for r in deps.runs.session_runs(record.session_key) if r.parent_run_id == record.run_id
    ]


def _stop_children(deps: Deps, record: RunRecord, *, by: str) -> None:
    """Cascade: cancel the run's own fan-ins, then stop every unfinished descendant."""
    for join_id in deps.joins.of_session(record.session_key):
        if join_id.startswith(f"{record.run_id}-"):
            deps.joins.cancel(join_id)
            deps.jobs.cancel_queued(JOB_PREFIX + join_id)  # fired, its resume waits a slot
    for child in children_of(deps, record):
        if not child.status.terminal:
            stop_run(
                deps,
                child.run_id,
                by=f"{by} (its parent {run_title(record, noun='', name='none')} was stopped)",
            )


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
        if stop_run(deps, record.run_id, by=f"fanbot (its parent ended: {why})").ended:
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


def stop_note(deps: Deps, record: RunRecord, by: str, *, now: float | None = None) -> str:
    """The announce's Notes for a stop: who, and how far the run had got."""
    now = now or time.time()
    if record.status is RunStatus.QUEUED or record.started_at is None:
        return f"stopped by {by} before it started"
    steps = deps.transcripts.length(record.session_id)
    ran = units.duration(now - record.started_at)
    tokens = units.tokens(record.usage.total)
    progress = f"{steps} transcript message(s), {tokens} tokens so far"
    partial = "; the result is partial" if record.result.strip() else ""
    return f"stopped by {by} after {ran} ({progress}){partial}"


def _hard_stop(deps: Deps, record: RunRecord) -> bool:
    grace = deps.settings.subagents.hard_kill_grace_seconds
    deps.stops.recheck_run(record.run_id, at=time.time() + grace)
    return deps.jobs.send_stop(record.job_id)


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
    return record.job_id


@dataclass(frozen=True, kw_only=True)
class TurnInfo:
    """The executing main-agent turn of a session: its job and whose message it answers."""

    job_id: str
    owner: str


def running_turn(deps: Deps, session_key: str) -> TurnInfo | None:
    """The session's executing turn, if any."""
    for job_id, payload in deps.jobs.started_turns():
        if payload.get("session_key") == session_key:
            owner = qualified_user(str(payload.get("platform")), str(payload.get("sender_id")))
            return TurnInfo(job_id=job_id, owner=owner)
    return None


def stop_turn(deps: Deps, session_key: str, *, job_id: str | None = None) -> None:
    """Ask the session's running turn to end at its next step (it answers "Stopped.").

    A turn blocked in a long model call never reaches its next step, so ``job_id`` (the
    executing turn) also goes into ``stops:pending``: the sweep hard-stops it if it still
    executes after the grace.
    """
    deps.stops.stop_turn(session_key, ttl=deps.settings.turn_timeout_seconds)
    if job_id:
        due = time.time() + deps.settings.subagents.hard_kill_grace_seconds
        deps.stops.recheck_turn(job_id, at=due)
