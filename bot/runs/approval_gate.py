"""Approvals (human in the loop), one gate for every tool call: a subagent run or a
main-agent turn (a continuation too) that reaches a tool call needing a person parks, asks
in its thread, and goes on as a new job once someone decides (or time runs out)
(docs/architecture.md, "Approvals: one gate").

The flow, each step a function here:

1. :func:`needs_approval` (pure) is the one policy: it tells every tool loop's gate
   (:func:`bot.agent.gated.gate_for`) which calls wait, whoever calls.
2. :func:`park_for` (a run) or :func:`park_turn` (a turn) records the approval (the call
   and the rest of its step) and raises :class:`~bot.errors.RunParked`; the run's
   lifecycle parks the run and frees its slot, a turn's marks it parked and ends its job
   (its lane frees); then :func:`post_request` puts the request with its buttons in the
   outbox.
3. :func:`decide` (a person, from any adapter: a button press or ``!approve <id>``) or
   :func:`expire_due` (the maintenance sweep) settles it once, edits the request to the
   outcome and enqueues the resume job (:func:`resume`: the run's, or the turn's on its
   session's lane); :func:`denied_result` is the tool result a denied call gets.

Parsing, authorization and all texts are pure (:func:`parse_decision`, :func:`may_decide`,
:func:`request_text`, :func:`outcome_text`).

A spawn held before it starts (its cost estimate is above
``budgets.approve_above_usd``) is an approval of kind ``spawn`` through the same steps; its
texts and what its decision does are :mod:`bot.runs.spawn_approval`'s.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from bot.config import Settings, SubagentType
from bot.deps import Deps
from bot.errors import RunParked
from bot.runs import spawn_approval
from bot.runs.access import Actor, may_control
from bot.runs.decisions import DecisionRequest
from bot.runs.decisions import parse_decision as parse_decision  # where callers look
from bot.runs.line import slot_job
from bot.runs.naming import Icon, run_title
from bot.store.approvals import ApprovalKind, ApprovalRecord, ApprovalState, PendingCall
from bot.store.jobs import TurnJob
from bot.text.units import duration
from bot.types import Action, Outbound, OutboundKind, RunRecord, ThreadRef

log = logging.getLogger(__name__)

RESUME_PREFIX = "approval-"
"""Job id prefix of the resume job (one per approval: a second decision finds it)."""
ARGS_PREVIEW = 600


def needs_approval(settings: Settings, sub_type: SubagentType | None, tool: str) -> bool:
    """Whether a call of ``tool`` must wait for a person (pure): the global
    ``tools.require_approval`` patterns, for every caller (a main-agent turn passes no
    ``sub_type``), or a subagent type's ``require_approval``."""
    patterns = list(settings.tools.require_approval)
    if sub_type is not None:
        if sub_type.require_approval is True:
            return True
        if isinstance(sub_type.require_approval, list):
            patterns += sub_type.require_approval
    return any(fnmatch.fnmatchcase(tool, p) for p in patterns)


def park_for(deps: Deps, record: RunRecord, calls: Sequence[PendingCall], *, text: str) -> NoReturn:
    """Record the approval ``calls[0]`` needs and park the run (raises RunParked)."""
    approval = _create(
        deps,
        thread=record.thread,
        requester=record.requester,
        calls=calls,
        run_id=record.run_id,
        label=run_title(record, noun="", name="raw")[:80],
    )
    log.info(
        "run %s waits for approval %s (%s)", record.run_id, approval.approval_id, calls[0].name
    )
    raise RunParked(text, rounds=record.rounds, approval_id=approval.approval_id)


def park_turn(
    deps: Deps,
    *,
    reply_key: str,
    thread: ThreadRef,
    requester: str,
    calls: Sequence[PendingCall],
    text: str,
) -> NoReturn:
    """Record the approval ``calls[0]`` of a main-agent turn needs (raises RunParked: the
    turn marks itself parked and ends its job, :func:`bot.agent.turn.execute_turn`)."""
    approval = _create(deps, thread=thread, requester=requester, calls=calls, reply_key=reply_key)
    log.info("turn %s waits for approval %s (%s)", reply_key, approval.approval_id, calls[0].name)
    raise RunParked(text, rounds=0, approval_id=approval.approval_id)


def _create(
    deps: Deps,
    *,
    thread: ThreadRef,
    requester: str,
    calls: Sequence[PendingCall],
    run_id: str = "",
    reply_key: str = "",
    label: str = "",
) -> ApprovalRecord:
    now = time.time()
    approval = ApprovalRecord(
        approval_id=secrets.token_hex(4),
        run_id=run_id,
        reply_key=reply_key,
        thread=thread,
        requester=requester,
        calls=tuple(calls),
        created_at=now,
        due_at=now + deps.settings.approvals.timeout_seconds,
        label=label,
    )
    deps.approvals.create(approval)
    return approval


def subject(approval: ApprovalRecord) -> str:
    """Who asks (pure): ``Subagent #1 calc``, or the main agent for a turn."""
    return "The agent" if approval.for_turn else f"Subagent {approval.label}"


def request_text(approval: ApprovalRecord, *, timeout_s: int) -> str:
    """The request as posted (pure)."""
    if approval.kind is ApprovalKind.SPAWN:
        return spawn_approval.request_text(approval, timeout_s=timeout_s)
    call = approval.call
    return (
        f"{Icon.APPROVAL} {subject(approval)} wants to run `{call.name}`:\n"
        f"```\n{_preview(call.arguments)}\n```\n"
        f"Approve or deny (id `{approval.approval_id}`, no answer in "
        f"{duration(timeout_s, style='exact')} means deny). Reply `!approve {approval.approval_id} "
        "{…new arguments…}` to run it with other arguments."
    )


def request_actions(approval_id: str) -> tuple[Action, ...]:
    return (
        Action(id=f"!approve {approval_id}", label=f"{Icon.APPROVED} Approve", style="primary"),
        Action(id=f"!deny {approval_id}", label=f"{Icon.DENIED} Deny", style="danger"),
    )


def post_request(deps: Deps, approval_id: str) -> None:
    """Put the request with its buttons in the outbox (after the run is parked, so a
    press always finds it parked)."""
    approval = deps.approvals.get(approval_id)
    if approval is None:
        return
    text = request_text(approval, timeout_s=deps.settings.approvals.timeout_seconds)
    message = Outbound(
        thread=approval.thread,
        text=text,
        kind=OutboundKind.STATUS,
        idempotency_key=approval.request_key,
        actions=request_actions(approval_id),
    )
    deps.outbox.put(message)


def outcome_text(approval: ApprovalRecord) -> str:
    """What the request reads once decided (pure)."""
    if approval.kind is ApprovalKind.SPAWN:
        return spawn_approval.outcome_text(approval, by=_who(approval.decided_by))
    call = approval.call
    head = f"{subject(approval)}: `{call.name}`"
    if approval.state is ApprovalState.APPROVED:
        edited = " with edited arguments" if approval.arguments != call.arguments else ""
        return f"{Icon.APPROVED} {head} approved{edited} by {_who(approval.decided_by)}."
    if approval.state is ApprovalState.DENIED:
        return f"{Icon.DENIED} {head} denied by {_who(approval.decided_by)}."
    return f"{Icon.EXPIRED} {head} denied: no answer in time."


def denied_result(approval: ApprovalRecord) -> str:
    """The tool result of a call that will not run (pure)."""
    if approval.state is ApprovalState.EXPIRED:
        return "error: this call needed a person's approval and nobody answered in time, so it did not run"
    return f"error: denied by {_who(approval.decided_by)}; the call did not run"


def may_decide(
    settings: Settings,
    approval: ApprovalRecord,
    run: RunRecord | None,
    *,
    platform: str,
    user_id: str,
    turn_waits: bool = False,
) -> str:
    """ "" when ``platform:user_id`` may decide (an admin or the run's requester; for a
    turn's approval, ``turn_waits`` for it, the person who asked), else the polite refusal
    (pure)."""
    actor = Actor(platform=platform, user_id=user_id, admins=settings.admins)
    if approval.for_turn:
        if not turn_waits:
            return "That answer is no longer waiting; there is nothing left to decide."
        same = actor.platform == approval.thread.platform
        if same and (actor.is_admin or (actor.user_id and approval.requester == actor.qualified)):
            return ""
        return "Sorry, only the person who asked or an admin can approve or deny this."
    if run is None or run.status.terminal:
        return "That run has ended; there is nothing left to decide."
    if may_control(actor, run, verb="decide").allowed:
        return ""
    return "Sorry, only the person who started this run or an admin can approve or deny it."


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What the person who decided is told (``refused``: privately where possible)."""

    text: str
    refused: bool = False


def decide(deps: Deps, request: DecisionRequest, *, platform: str, user_id: str) -> Answer:
    """Settle an approval for a person; returns what to tell them."""
    approval = deps.approvals.get(request.approval_id)
    if approval is None:
        return Answer(text=f"No approval `{request.approval_id}`.", refused=True)
    if approval.state is not ApprovalState.PENDING:
        return Answer(text=f"Already decided: {outcome_text(approval)}", refused=True)
    run = deps.runs.get(approval.run_id) if approval.run_id else None
    waits = (
        approval.for_turn
        and deps.turn_attempts.parked_on(approval.reply_key) == approval.approval_id
    )
    refusal = may_decide(
        deps.settings, approval, run, platform=platform, user_id=user_id, turn_waits=waits
    )
    if refusal:
        return Answer(text=refusal, refused=True)
    arguments = approval.call.arguments
    if request.arguments is not None and approval.kind is ApprovalKind.SPAWN:
        return Answer(text="Not decided: a spawn is approved as it was asked.", refused=True)
    if request.arguments is not None:
        problem = _args_problem(request.arguments)
        if problem:
            return Answer(text=f"Not decided: {problem}", refused=True)
        arguments = request.arguments
    state = ApprovalState.APPROVED if request.approve else ApprovalState.DENIED
    by = f"{platform}:{user_id}"
    if not deps.approvals.decide(approval.approval_id, state=state, by=by, arguments=arguments):
        return Answer(text="Someone decided just before you.", refused=True)
    settled = _settle(deps, approval.approval_id)
    return Answer(text=outcome_text(settled) if settled else "Decided.")


def expire_due(deps: Deps, *, now: float | None = None) -> list[str]:
    """Maintenance: deny the approvals nobody answered in time; returns their ids."""
    now = time.time() if now is None else now
    expired = []
    for approval_id in deps.approvals.due(now=now):
        if deps.approvals.decide(approval_id, state=ApprovalState.EXPIRED, by="", arguments=""):
            _settle(deps, approval_id)
            expired.append(approval_id)
    return expired


def withdraw(deps: Deps, approval_id: str) -> None:
    """The run (or turn) was stopped while it waited: the request says so. A run does not
    resume (its stop ends it); a turn's resume job is queued, and it answers "Stopped."."""
    if deps.approvals.decide(approval_id, state=ApprovalState.EXPIRED, by="", arguments=""):
        approval = deps.approvals.get(approval_id)
        if approval is not None and approval.kind is ApprovalKind.SPAWN:
            _edit_request(deps, approval, spawn_approval.withdrawn_text(approval))
        elif approval is not None:
            head = f"{subject(approval)}: `{approval.call.name}`"
            what = "the answer" if approval.for_turn else "the run"
            _edit_request(
                deps, approval, f"{Icon.STOPPED} {head}: {what} was stopped before a decision."
            )
            if approval.for_turn:
                _resume_turn(deps, approval)


def _settle(deps: Deps, approval_id: str) -> ApprovalRecord | None:
    """After the decision: edit the request to the outcome and resume the run."""
    approval = deps.approvals.get(approval_id)
    if approval is None:
        return None
    _edit_request(deps, approval, outcome_text(approval))
    resume(deps, approval)
    return approval


def _edit_request(deps: Deps, approval: ApprovalRecord, text: str) -> None:
    """Edit the posted request (buttons gone); post anew if it was never posted."""
    message_id = deps.outbox.posted_part(approval.request_key)
    deps.outbox.put(
        Outbound(
            thread=approval.thread,
            text=text,
            kind=OutboundKind.STATUS,
            edit_of=message_id,
            idempotency_key=f"{approval.request_key}:outcome",
        ),
    )


def resume(deps: Deps, approval: ApprovalRecord) -> None:
    """Enqueue the job that resumes the run (or the turn) from its saved state (any
    worker); a held spawn starts, or ends if it was denied."""
    if approval.kind is ApprovalKind.SPAWN:
        spawn_approval.settle(deps, approval, by=_who(approval.decided_by))
        return
    if approval.for_turn:
        _resume_turn(deps, approval)
        return
    record = deps.runs.get(approval.run_id)
    if record is None or record.status.terminal:
        return
    job_id = RESUME_PREFIX + approval.approval_id
    if deps.jobs.exists(job_id):
        return
    deps.jobs.enqueue_resume(
        slot_job(
            deps.settings,
            record,
            run_id=record.run_id,
            description=f"{run_title(record, noun='subagent', name='none')} resumes after "
            f"approval {approval.approval_id}",
        ),
        job_id=job_id,
        approval_id=approval.approval_id,
    )


def _resume_turn(deps: Deps, approval: ApprovalRecord) -> None:
    """Mark the parked turn queued under its resume job (fenced: once) and queue that job on
    the session's turn lane; it goes on from the turn's recorded steps. A process lost
    between the two leaves the mark, and the reaper queues the job
    (:func:`bot.agent.turn_recover.reap_turns`)."""
    job_id = RESUME_PREFIX + approval.approval_id
    payload = deps.turn_attempts.unpark(
        approval.reply_key, approval_id=approval.approval_id, job_id=job_id
    )
    if payload is None:
        return
    turn = TurnJob.model_validate(payload)
    deps.jobs.enqueue_turn(turn, job_id=job_id, timeout=deps.settings.turn_timeout_seconds)
    log.info("turn %s resumes after approval %s", approval.reply_key, approval.approval_id)


def _args_problem(text: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"the new arguments are not JSON ({exc.msg})."
    if not isinstance(value, dict):
        return "the new arguments must be a JSON object."
    return ""


def _preview(arguments: str) -> str:
    try:
        text = json.dumps(json.loads(arguments or "{}"), indent=1, ensure_ascii=False)
    except ValueError:
        text = arguments
    text = text.replace("```", "'''")
    return text if len(text) <= ARGS_PREVIEW else text[: ARGS_PREVIEW - 1] + "…"


def _who(qualified: str) -> str:
    """``telegram:1001`` -> ``@1001``; a Matrix id keeps its own ``@``."""
    user = qualified.partition(":")[2] or qualified
    return user if user.startswith("@") else f"@{user}" if user else "nobody"
