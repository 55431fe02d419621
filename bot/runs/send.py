"""``/subagents send``: steer a running run, or continue a finished one with a follow-up.

A follow-up is a new run (new run id, number and job) on the SAME child session key and
transcript, so the subagent continues its own conversation: when a run starts and its
transcript already holds messages, :func:`continuation` rebuilds the context from them.
"""

from __future__ import annotations

import dataclasses
import enum
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.deps import Deps
from bot.runs.line import enqueue_run
from bot.runs.naming import run_title
from bot.runs.steer_receipts import settle
from bot.store.receipts import ReceiptState
from bot.types import RunRecord, RunStatus

MAX_RESUMED_MESSAGES = 200


class SendOutcome(enum.StrEnum):
    STEERED = "steered"
    FOLLOW_UP = "follow_up"
    ARCHIVED = "archived"


@dataclass(frozen=True, kw_only=True)
class SendResult:
    """What ``send`` did.

    Attributes:
        outcome: steered (into a running run), follow_up (a new run) or archived (refused).
        run: The run that got the message: the running one, or the new follow-up.
    """

    outcome: SendOutcome
    run: RunRecord


Receipt = Callable[[RunRecord], str]
"""Called just before a message is queued for a running run; returns its receipt id."""


def send(
    deps: Deps, record: RunRecord, message: str, *, requester: str, receipt: Receipt | None = None
) -> SendResult:
    """Deliver ``message`` to ``record``'s child session; ``requester`` is ``platform:user``.

    ``receipt`` tracks a steering message (:mod:`bot.runs.steer_receipts`): whoever takes it out
    of the inbox (the run, or its end) settles the receipt.
    """
    record = deps.runs.get(record.run_id) or record
    target = _live_run(deps, record) or record
    if not target.status.terminal:
        receipt_id = receipt(target) if receipt is not None else ""
        deps.runs.push_inbox(target.run_id, message, receipt=receipt_id)
        fresh = deps.runs.get(target.run_id)
        if fresh is None or not fresh.status.terminal:
            return SendResult(outcome=SendOutcome.STEERED, run=target)
        # It ended while we wrote: its end may not have seen the message; settle it here.
        new = settle_leftovers(deps, fresh)
        if new is not None:
            return SendResult(outcome=SendOutcome.FOLLOW_UP, run=new)
        return SendResult(outcome=SendOutcome.STEERED, run=target)
    if is_archived(deps, target):
        return SendResult(outcome=SendOutcome.ARCHIVED, run=target)
    return SendResult(
        outcome=SendOutcome.FOLLOW_UP, run=follow_up(deps, target, message, requester=requester)
    )


def settle_leftovers(
    deps: Deps, record: RunRecord, *, items: Sequence[tuple[str, str]] | None = None
) -> RunRecord | None:
    """After ``record`` ended: messages it never read go to a follow-up run (one for all
    of them), and their receipts say so; a stopped or archived run's are not delivered.
    ``items``: the ``(message, receipt id)`` pairs taken already (None: take them now).
    Returns the follow-up, if one started."""
    if items is None:
        items = deps.runs.drain_inbox_receipts(record.run_id)
    if not items:
        return None
    new = None
    if record.status is not RunStatus.STOPPED and not is_archived(deps, record):
        text = "\n\n".join(message for message, _ in items)
        new = follow_up(deps, record, text, requester=record.requester)
    shown = f"{run_title(new, noun='', name='none')} (`{new.run_id[:8]}`)" if new else ""
    for _, receipt_id in items:
        settle(deps, receipt_id, ReceiptState.MISSED, follow_up=shown)
    return new


def _live_run(deps: Deps, record: RunRecord) -> RunRecord | None:
    """The unfinished run on ``record``'s child session, if one is (a newer follow-up)."""
    if not record.status.terminal:
        return record
    for run in deps.runs.session_runs(record.session_key):
        if run.child_session_key == record.child_session_key and not run.status.terminal:
            return run
    return None


def follow_up(deps: Deps, record: RunRecord, message: str, *, requester: str) -> RunRecord:
    """Record and enqueue a new run continuing ``record``'s child session with ``message``."""
    run_id = uuid.uuid4().hex
    new = dataclasses.replace(
        record,
        run_id=run_id,
        job_id=run_id,
        seq=deps.runs.next_seq(record.session_key),
        requester=requester,
        task=message,
        status=RunStatus.QUEUED,
        created_at=time.time(),
        started_at=None,
        ended_at=None,
        result="",
        notes="",
        prompt_tokens=0,
        completion_tokens=0,
        cached_tokens=0,
        reasoning_tokens=0,
        usage_estimated=False,
        cost_usd=None,
        warnings=(),
        archived_at=None,
        join_id="",  # a follow-up reports in the thread; nobody waits for it
    )
    deps.runs.create(new)
    siblings = [
        r.run_id
        for r in deps.runs.session_runs(record.session_key)
        if r.child_session_key == record.child_session_key and r.run_id != run_id
    ]
    # The session lives on: the earlier runs' archive dates no longer apply; the follow-up's
    # own finalize schedules the archive of the shared transcript.
    deps.runs.unschedule_archive(*siblings)
    enqueue_run(deps, new)
    return new


def is_archived(deps: Deps, record: RunRecord) -> bool:
    """Whether the run's child session (its transcript) has been archived."""
    key = deps.transcripts.current_key(record.session_id, archived_at=record.archived_at)
    return not deps.transcripts.is_live(key, record.session_id)


def continuation(prior: Sequence[Mapping[str, Any]], task: str) -> list[dict[str, Any]]:
    """Context of a follow-up (pure): the earlier transcript, then ``task`` as a user turn.

    Bookkeeping fields (``ts``) are dropped, and so is a trailing assistant tool call whose
    results never arrived (the earlier run was stopped mid-call), which the API rejects.
    The system message is kept; the middle is trimmed to the last messages.
    """
    messages = [{k: v for k, v in m.items() if k != "ts"} for m in prior]
    messages = messages[: _complete_prefix(messages)]
    if len(messages) > MAX_RESUMED_MESSAGES:
        head = messages[:1] if messages and messages[0].get("role") == "system" else []
        tail = messages[-(MAX_RESUMED_MESSAGES - len(head)) :]
        while tail and tail[0].get("role") == "tool":
            tail = tail[1:]
        messages = head + tail
    return [*messages, {"role": "user", "content": task}]


def _complete_prefix(messages: Sequence[Mapping[str, Any]]) -> int:
    """Length of the longest prefix in which every tool call has its result."""
    good = 0
    pending: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            pending.discard(str(message.get("tool_call_id", "")))
        else:
            if pending:
                return good
            pending = {str(c.get("id", "")) for c in message.get("tool_calls") or ()}
        if not pending:
            good = i + 1
    return good
