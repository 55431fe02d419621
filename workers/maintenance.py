"""Maintenance: the reaper (runs whose worker died go on in a new attempt, or end:
:mod:`bot.runs.recover`; turns too: :mod:`bot.agent.turn_recover`; runs parked for a fan-in or an approval are left alone), approvals nobody answered in time (denied), fan-ins a dead process left
(:mod:`bot.runs.join`), the repair of jobs RQ lost (queued
in no queue, or holding a concurrency slot for nobody: :mod:`workers.repair`), hard-stop
re-sends, the archiver and the session sweep (:mod:`bot.store.session_ttl`).

Runs in the worker launcher's main process every couple of seconds, behind a Redis lock so
several worker hosts do not all do the same sweep. Everything it does is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rq.job import JobStatus

from bot.agent.turn_recover import reap_turns
from bot.deps import Deps
from bot.observe import record as observed
from bot.runs.approval_gate import expire_due
from bot.runs.finalize import finalize_run
from bot.runs.join import dispatch_due, seal_abandoned
from bot.runs.line import admit_next, after_slot_freed, show_places
from bot.runs.recover import recover_run
from bot.runs.recurring import fire_due
from bot.runs.stop import resend_hard_stops, stop_orphans
from bot.types import RunRecord, RunStatus
from workers.repair import repair_jobs

log = logging.getLogger(__name__)

_JOB_GONE = {
    JobStatus.FAILED: (RunStatus.ERROR, "the job failed before the run started"),
    JobStatus.STOPPED: (RunStatus.STOPPED, "stopped before it started"),
    JobStatus.CANCELED: (RunStatus.STOPPED, "canceled before it started"),
}


def reap(deps: Deps, *, now: float | None = None) -> list[str]:
    """Resume (or end) runs whose worker died, and end queued runs whose job is gone;
    returns the run ids it resumed or ended."""
    now = now or time.time()
    ended: list[str] = []
    for record in deps.runs.get_many(sorted(deps.runs.active_ids())):
        if _lost(deps, record, now):
            why = (
                "its recovery job was lost"
                if record.resuming
                else "its worker stopped responding (no heartbeat for "
                f"{deps.settings.subagents.stale_after_seconds:g}s)"
            )
            got = recover_run(deps, record.run_id, dead_job=record.executing_job, why=why)
            if got.verdict:
                ended.append(record.run_id)
            continue
        verdict = _verdict(deps, record, now)
        if verdict and finalize_run(deps, record.run_id, status=verdict[0], notes=verdict[1]):
            ended.append(record.run_id)
    if ended:
        _refill_slots(deps)
        log.warning("reaper resumed or ended %d run(s): %s", len(ended),
                    ", ".join(i[:8] for i in ended))  # fmt: skip
    return ended


_RECOVERY_GONE = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED, None)


def _lost(deps: Deps, record: RunRecord, now: float) -> bool:
    """Whether ``record``'s run executes nowhere any more: its heartbeat lapsed (its
    worker's host died), or the job queued to recover it is gone. A parked run waits for
    its children or a person with no job: their fan-in or the decision resumes it."""
    if record.status is not RunStatus.RUNNING or record.parked_at is not None:
        return False
    if record.resuming is not None:  # no heartbeat until its recovery job starts it
        return deps.jobs.status(record.executing_job) in _RECOVERY_GONE
    started = record.started_at or record.created_at
    stale = deps.settings.subagents.stale_after_seconds
    return now - started > stale and not deps.runs.heartbeat_alive(record.run_id)


def _verdict(deps: Deps, record: RunRecord, now: float) -> tuple[RunStatus, str] | None:
    stale = deps.settings.subagents.stale_after_seconds
    if record.status is RunStatus.RUNNING:
        return None  # executing (or lost: see _lost), or parked
    if record.status is RunStatus.QUEUED:
        if record.parked_at is not None:
            return None  # a spawn held for approval has no job yet (bot.runs.spawn_approval)
        if now - record.created_at < stale:
            return None  # spawn writes the record just before it enqueues the job
        job_status = deps.jobs.status(record.job_id)
        if job_status is None:
            return RunStatus.UNKNOWN, "its queued job disappeared"
        return _JOB_GONE.get(job_status)
    return None


def _refill_slots(deps: Deps) -> None:
    """Let waiting runs take the slots of the runs just reaped, now rather than next pass."""
    after_slot_freed(deps)


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


def sweep(deps: Deps, *, steady: Callable[[], float] | None = None) -> None:
    """One maintenance pass, if no other host holds the lock right now.

    ``steady`` (seconds Redis has taken writes without a break, e.g.
    :meth:`bot.redis.watch.RedisWatch.steady_for`) holds back liveness verdicts (reaper,
    abandoned fan-ins, lost jobs) until the runs have had ``stale_after_seconds`` to
    heartbeat again after an outage (a Sentinel failover pauses writes for about ten
    seconds). It is asked after the lock is taken: that write may have waited out an outage.
    """
    interval = deps.settings.subagents.heartbeat_seconds
    if not deps.leases.take_maintenance(seconds=interval):
        return
    stale = deps.settings.subagents.stale_after_seconds
    judge_liveness = steady is None or steady() >= stale
    if judge_liveness:
        reap(deps)
        reap_turns(deps)  # turns whose lease lapsed go on in a new attempt
        stop_orphans(deps)
        seal_abandoned(deps)
    dispatch_due(deps)
    if judge_liveness:
        repair_jobs(deps)
    if admit_next(deps):  # a slot whose admitter died before it could admit: not lost
        show_places(deps)
    deps.jobs.fair.prune()
    resend_hard_stops(deps)
    expire_due(deps)  # no answer in time means deny: the run goes on with the denial
    archive_due(deps)
    deps.session_sweep.sweep_once()  # session keys from before their TTL get one
    fire_due(deps)  # each tick once across workers: the store's claim decides
    observed.flush(deps)  # the runs it spawned, counted


def maintenance_loop(
    deps: Deps, stop: threading.Event, *, steady: Callable[[], float] | None = None
) -> None:
    """Sweep every heartbeat interval until ``stop`` is set; errors are logged, not fatal.
    ``steady``: see :func:`sweep`."""
    interval = deps.settings.subagents.heartbeat_seconds
    while not stop.wait(interval):
        try:
            sweep(deps, steady=steady)
        except Exception:  # Redis restarts and the like: keep sweeping
            log.warning("maintenance sweep failed", exc_info=True)
