"""Maintenance: the reaper (dead runs end ``unknown``), the repair of jobs RQ lost (queued
in no queue, or holding a concurrency slot for nobody: :mod:`workers.repair`), hard-stop
re-sends and the archiver.

Runs in the worker launcher's main process every couple of seconds, behind a Redis lock so
several worker hosts do not all do the same sweep. Everything it does is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time

from rq.job import JobStatus

from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.runs.stop import resend_hard_stops
from bot.types import RunRecord, RunStatus
from workers.repair import repair_jobs

log = logging.getLogger(__name__)

_JOB_GONE = {
    JobStatus.FAILED: (RunStatus.ERROR, "the job failed before the run started"),
    JobStatus.STOPPED: (RunStatus.STOPPED, "stopped before it started"),
    JobStatus.CANCELED: (RunStatus.STOPPED, "canceled before it started"),
}


def reap(deps: Deps, *, now: float | None = None) -> list[str]:
    """Finalize runs whose worker died; returns the run ids it ended."""
    now = now or time.time()
    ended: list[str] = []
    for record in deps.runs.get_many(sorted(deps.runs.active_ids())):
        verdict = _verdict(deps, record, now)
        if verdict and finalize_run(deps, record.run_id, status=verdict[0], notes=verdict[1]):
            ended.append(record.run_id)
    if ended:
        _refill_slots(deps)
        log.warning("reaper ended %d run(s): %s", len(ended), ", ".join(i[:8] for i in ended))
    return ended


def _verdict(deps: Deps, record: RunRecord, now: float) -> tuple[RunStatus, str] | None:
    stale = deps.settings.subagents.stale_after_seconds
    if record.status is RunStatus.RUNNING:
        started = record.started_at or record.created_at
        if now - started > stale and not deps.runs.heartbeat_alive(record.run_id):
            return RunStatus.UNKNOWN, f"the worker stopped responding (no heartbeat for {stale:g}s)"
        return None
    if record.status is RunStatus.QUEUED:
        if now - record.created_at < stale:
            return None  # spawn writes the record just before it enqueues the job
        job_status = deps.jobs.status(record.job_id)
        if job_status is None:
            return RunStatus.UNKNOWN, "its queued job disappeared"
        return _JOB_GONE.get(job_status)
    return None


def _refill_slots(deps: Deps) -> None:
    """Finalize freed RQ slots of dead jobs; let waiting runs take them now, not in minutes."""
    deps.jobs.refill_subagent_slots(deps.settings.subagents.max_concurrent)


def archive_due(deps: Deps, *, now: float | None = None) -> list[str]:
    """Archive child sessions whose time has come; returns the run ids archived."""
    now = now or time.time()
    keep = int(deps.settings.subagents.retention_days * 86_400)
    archived: list[str] = []
    for run_id in deps.runs.due_for_archive(now=now):
        record = deps.runs.get(run_id)
        if record is None or record.archived_at is not None:
            deps.runs.unschedule_archive(run_id)
            continue
        # Archived runs, their status records and transcripts expire after the retention.
        archived_key = deps.transcripts.archive(record.session_id, now=now)
        deps.runs.mark_archived(record, now=now, keep_seconds=keep, transcript_key=archived_key)
        archived.append(run_id)
    return archived


def sweep(deps: Deps) -> None:
    """One maintenance pass, if no other host holds the lock right now."""
    interval = deps.settings.subagents.heartbeat_seconds
    if not deps.leases.take_maintenance(seconds=interval):
        return
    reap(deps)
    repair_jobs(deps)
    resend_hard_stops(deps)
    archive_due(deps)


def maintenance_loop(deps: Deps, stop: threading.Event) -> None:
    """Sweep every heartbeat interval until ``stop`` is set; errors are logged, not fatal."""
    interval = deps.settings.subagents.heartbeat_seconds
    while not stop.wait(interval):
        try:
            sweep(deps)
        except Exception:  # Redis restarts and the like: keep sweeping
            log.warning("maintenance sweep failed", exc_info=True)
