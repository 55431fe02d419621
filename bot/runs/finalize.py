"""Ending a run: compute cost, render the announce, and make the one terminal transition.

Every path that can end a run calls :func:`finalize_run` (or :func:`end_run` with the
record it read already): the job itself, RQ's failure and stop callbacks, the horse-killed
handler, the reaper and the stop command. This module only prepares what to write; whether
anything is written is decided once, by the compare-and-set of the finalize script
(:mod:`bot.store.finalize_script`), so only the first call changes anything. It needs the
stores only (no model client), so a backup finalizer is cheap.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from bot.deps import Deps
from bot.observe import metric_defs as catalog
from bot.observe import tracing
from bot.prices import estimate_cost
from bot.runs.estimate import sample_of
from bot.runs.join import after_last_run
from bot.runs.line import after_slot_freed
from bot.runs.outfiles import announce_files, out_snapshot
from bot.runs.render import (
    ANNOUNCE_SKIP,
    history_note,
    render_announce,
    render_compact_card,
)
from bot.runs.send import settle_leftovers
from bot.store.runs import TOOLS_FIELD, Finalization, OutFiles
from bot.types import Cleanup, Outbound, OutboundKind, RunRecord, RunStatus, Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StopMarks:
    """What a stop writes in the same script as the transition (whether or not it ends
    the run): the run's stop flag, and ``recheck_at``, when the sweep re-checks its hard
    stop (None: no hard stop was sent)."""

    recheck_at: float | None = None


def finalize_run(
    deps: Deps,
    run_id: str,
    *,
    status: RunStatus,
    result: str | None = None,
    notes: str = "",
    usage: Usage | None = None,
    tools: int | None = None,
    executor: str = "",
) -> bool:
    """End ``run_id`` with ``status`` unless it already ended; True if this call ended it.

    ``result=None`` keeps whatever partial result the run recorded while working;
    ``tools``: the run's tool call count, saved by the same script (``None``: as saved);
    ``executor``: the job of the attempt ending it (it ends nothing once a later attempt
    executes the run: bot.store.recovery).
    """
    # The out/ files come with the record: one round trip before the announce's write.
    record, seen = deps.runs.get_for_end(run_id, out_snapshot())
    if record is None:
        return False
    return end_run(
        deps,
        record,
        status=status,
        result=result,
        notes=notes,
        usage=usage,
        tools=tools,
        seen=seen,
        executor=executor,
    )


@tracing.traced("finalize")
def end_run(
    deps: Deps,
    record: RunRecord,
    *,
    status: RunStatus,
    result: str | None = None,
    notes: str = "",
    usage: Usage | None = None,
    tools: int | None = None,
    stop: StopMarks | None = None,
    seen: OutFiles | None = None,
    executor: str = "",
) -> bool:
    """:func:`finalize_run` for a ``record`` read already (it is not read again); the
    script decides whether it still ends (True if this call ended it). ``stop``: a stop's
    own writes, made by the same script either way. ``seen``: the run's ``out/`` files, when
    read with ``record`` (see :func:`~bot.runs.outfiles.announce_files`)."""
    ended_at = time.time()
    usage = usage or record.usage
    record = dataclasses.replace(
        record,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        usage_estimated=usage.estimated,
        cost_usd=estimate_cost(deps.settings, record.model, usage),
    )
    text = record.result if result is None else result
    quiet = status is RunStatus.SUCCESS and text.strip() == ANNOUNCE_SKIP
    # A child reports to its parent run (its fan-in resumes the parent with this result),
    # never to the thread or the requester's history.
    skip = quiet or record.depth > 1
    files, file_notes = ((), []) if skip else announce_files(deps, record, seen=seen)
    notes = _notes(record, status, "\n".join([notes.strip(), *file_notes]))
    outcome = Finalization(
        status=status,
        result=text,
        notes=notes,
        announce=None
        if skip
        else _announce(deps, record, status, text, notes, ended_at, files=files),
        history_entry=None
        if skip
        else {
            "role": "user",
            "content": history_note(
                record,
                status=status,
                result=text,
                max_chars=deps.settings.history.max_message_chars,
            ),
        },
        archive_at=_archive_at(deps, record, ended_at),
        extra=_usage_fields(record) | ({} if tools is None else {TOOLS_FIELD: tools}),
        ended_at=ended_at,
        raise_stop=stop is not None,
        quiet=quiet,
        metrics=tuple(catalog.run_ended(record, status, ended_at=ended_at)),
        recheck_at=stop.recheck_at if stop is not None else None,
        executor=executor,
        sample=sample_of(record),  # for the estimates of later spawns (bot.runs.estimate)
    )
    deps.failpoints.hit("run.finalize")
    ended = deps.runs.end(
        record,
        outcome,
        slot_key=deps.jobs.subagent_slot_key(),
        join_grace=deps.joins.grace_seconds,
    )
    if ended.code:
        log.info("run %s ended %s", record.run_id, status.value)
        after_slot_freed(deps, left_line=record.status is RunStatus.QUEUED)
        # Steering it never read starts a follow-up (after the announce, so it reads next).
        ended_record = dataclasses.replace(record, status=status)
        settle_leftovers(deps, ended_record, items=ended.leftovers)
    if ended.code == 2:
        after_last_run(deps, record.join_id)
    return bool(ended.code)


def _notes(record: RunRecord, status: RunStatus, notes: str) -> str:
    parts = [notes.strip()] if notes.strip() else []
    if record.resumes and status is not RunStatus.UNKNOWN:  # unknown: its notes say why
        parts.append(f"resumed after a worker was lost ({record.resumes}×)")
    parts += [f"warning: {w}" for w in record.warnings]
    return "\n".join(parts)


def _announce(
    deps: Deps,
    record: RunRecord,
    status: RunStatus,
    text: str,
    notes: str,
    ended_at: float,
    *,
    files: tuple[str, ...] = (),
) -> Outbound:
    compact = deps.settings.subagents.announce == "synthesis" and record.join_id
    body = (
        render_compact_card(record, status=status, ended_at=ended_at)
        if compact
        else render_announce(
            record,
            status=status,
            result=text,
            notes=notes,
            ended_at=ended_at,
            transcript_ref=deps.keys.transcript(record.session_id),
            max_result_chars=deps.settings.subagents.max_result_chars,
        )
    )
    return Outbound(
        thread=record.thread,
        text=body,
        kind=OutboundKind.ANNOUNCE,
        idempotency_key=f"announce:{record.run_id}",
        run_id=record.run_id,
        attachments=files,
        workspace=record.session_key if files else "",
        traceparent=tracing.traceparent() or record.traceparent,
    )


def _archive_at(deps: Deps, record: RunRecord, ended_at: float) -> float:
    if record.cleanup is Cleanup.DELETE:
        return ended_at
    return ended_at + deps.settings.subagents.archive_after_minutes * 60


def _usage_fields(record: RunRecord) -> dict[str, str | int | float]:
    fields: dict[str, str | int | float] = {**record.usage.record_fields()}
    if record.cost_usd is not None:
        fields["cost_usd"] = record.cost_usd
    return fields
