"""A spawn held for a person's approval before it starts, because its p90 cost estimate
is above ``FANBOT_BUDGETS__APPROVE_ABOVE_USD`` (see docs/architecture.md, *Cost known
before spending*).

It goes through the one approval machinery (:mod:`bot.runs.approval_gate`), as an approval
of kind ``spawn`` (:class:`~bot.store.approvals.ApprovalKind`):

1. :func:`hold` (called by :func:`bot.runs.spawn.spawn_run`) records the approval, with the
   estimate as its ``detail``, and marks the new run parked (``queued`` with
   ``parked_at``: it has no job yet, so no slot and nothing for the reaper to end);
   the spawn then posts the request with its buttons (``approval_gate.post_request``)
   and :func:`show_held` puts "waiting for approval" and the estimate on its card;
2. a decision (``approval_gate.decide``) or its timeout (``approval_gate.expire_due``)
   settles the approval once, edits the request (:func:`outcome_text`) and calls
   :func:`settle`: approved -> the run goes in line like any spawn; denied or expired ->
   it ends ``stopped`` without starting, with why as its result (:func:`ended_note`), so
   its announce, the requester's history and its fan-in (the model's continuation turn)
   say so;
3. a stop while it waits withdraws the request (``approval_gate.withdraw``,
   :func:`withdrawn_text`) and ends the run as any queued run.

The texts are pure; ``approval_gate`` calls them for an approval of this kind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time

from bot.config import Settings
from bot.deps import Deps
from bot.runs.estimate import Estimate, above, card_note, estimate_text, usd
from bot.runs.finalize import finalize_run
from bot.runs.line import enqueue_run
from bot.runs.naming import Icon, one_line, run_title
from bot.store.approvals import ApprovalKind, ApprovalRecord, ApprovalState, PendingCall
from bot.store.progress import ProgressEvent
from bot.text.units import duration
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)

TASK_PREVIEW = 200
WAITING = "waiting for approval"


def needs_approval(settings: Settings, est: Estimate) -> bool:
    """Whether a spawn with estimate ``est`` waits for a person (pure)."""
    return above(est, settings.budgets.approve_above_usd)


def hold_reason(est: Estimate, limit_usd: float) -> str:
    """``est. ~$0.40 (p90 $0.90) from 12 recent runs, above the $0.50 limit`` (pure)."""
    return f"{estimate_text(est)} from {est.runs} recent runs, above the {usd(limit_usd)} limit"


def hold(deps: Deps, record: RunRecord, est: Estimate) -> RunRecord:
    """Record the approval a new run's start needs; returns the run marked parked on it
    (to be created so: it gets no job until the approval)."""
    now = time.time()
    limit_usd = deps.settings.budgets.approve_above_usd or 0.0
    spawn_args = {"task": record.task, "subagent_type": record.subagent_type, "model": record.model}
    approval = ApprovalRecord(
        approval_id=secrets.token_hex(4),
        run_id=record.run_id,
        thread=record.thread,
        requester=record.requester,
        calls=(PendingCall(id="", name="sessions_spawn", arguments=json.dumps(spawn_args)),),
        created_at=now,
        due_at=now + deps.settings.approvals.timeout_seconds,
        label=run_title(record, noun="", name="raw", kind="after")[:80],
        kind=ApprovalKind.SPAWN,
        detail=hold_reason(est, limit_usd),
    )
    deps.approvals.create(approval)
    log.info("run %s waits for approval %s to start", record.run_id, approval.approval_id)
    return dataclasses.replace(record, parked_at=now, approval_id=approval.approval_id)


def show_held(deps: Deps, record: RunRecord) -> None:
    """Its status card: waiting for approval, with the estimate."""
    event = ProgressEvent(
        run_id=record.run_id, thread=record.thread, text=WAITING, note=card_note(record)
    )
    deps.progress.put(event)


def held(record: RunRecord) -> bool:
    """Whether ``record`` is a spawn waiting for approval to start (pure)."""
    return record.status is RunStatus.QUEUED and record.parked_at is not None


def _task(approval: ApprovalRecord) -> str:
    try:
        task = str(json.loads(approval.call.arguments).get("task", ""))
    except (ValueError, AttributeError):
        task = ""
    return one_line(task, TASK_PREVIEW)


def request_text(approval: ApprovalRecord, *, timeout_s: int) -> str:
    """The request as posted (pure)."""
    return (
        f"{Icon.APPROVAL} Subagent {approval.label} waits for approval to start: "
        f"{approval.detail}.\n"
        f"Task: {_task(approval)}\n"
        f"Approve or deny (id `{approval.approval_id}`, no answer in "
        f"{duration(timeout_s, style='exact')} means deny)."
    )


def outcome_text(approval: ApprovalRecord, *, by: str) -> str:
    """What the request reads once decided (pure); ``by``: who, as shown."""
    head = f"Subagent {approval.label}"
    if approval.state is ApprovalState.APPROVED:
        return f"{Icon.APPROVED} {head}: start approved by {by}."
    if approval.state is ApprovalState.DENIED:
        return f"{Icon.DENIED} {head}: start denied by {by}; it did not run."
    return f"{Icon.EXPIRED} {head}: not started, no answer in time."


def withdrawn_text(approval: ApprovalRecord) -> str:
    """What the request reads when the run was stopped while it waited (pure)."""
    return f"{Icon.STOPPED} Subagent {approval.label}: stopped before a decision."


def ended_note(approval: ApprovalRecord, *, by: str) -> str:
    """The result of a run whose start was denied or not approved in time (pure)."""
    why = (
        f"its start was denied by {by}"
        if approval.state is ApprovalState.DENIED
        else "nobody approved its start in time"
    )
    return f"Not started: {why} ({approval.detail})."


def settle(deps: Deps, approval: ApprovalRecord, *, by: str) -> None:
    """After the decision: an approved run goes in line, a denied or expired one ends
    ``stopped`` without starting. A run that ended meanwhile (stopped) is left alone."""
    record = deps.runs.get(approval.run_id)
    if record is None or not held(record) or record.approval_id != approval.approval_id:
        return
    if approval.state is ApprovalState.APPROVED:
        if not deps.jobs.exists(record.job_id):  # a second settle finds the job
            enqueue_run(deps, record)
        # Unparked once its job exists: the reaper ends a queued run whose job is gone.
        deps.runs.update(record.run_id, parked_at="")
        return
    # As its result, so the model reads why (its history note and fan-in carry results).
    finalize_run(deps, record.run_id, status=RunStatus.STOPPED, result=ended_note(approval, by=by))
