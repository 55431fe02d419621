"""What becomes of a main-agent turn whose worker was lost: it goes on in a new attempt, or
its thread hears it stopped or was lost. Never silence, never two replies.

Every noticer of a dead worker calls :func:`recover_turn` with the job it saw die: the
launcher (its worker process exited: threads pool, or fork pool with the horse dead too),
the fork pool's horse monitor (the horse died) and the reaper (:func:`reap_turns`: the
turn's lease lapsed, its host died). The decision and its mark are one script
(:meth:`bot.store.turn_attempts.TurnAttempts.decide`), fenced on that job, so a death
noticed twice is acted on once.

The lane: a session runs one turn at a time (RQ's ``RateLimit`` lane ``turn:<session>``,
:meth:`bot.store.jobs.Jobs.enqueue_turn`). The new attempt's job is queued through that
same lane, right after the script marked it: it waits behind the dead job, whose slot RQ
frees when it fails that job (the horse monitor's failure handling, or
:meth:`bot.store.rq_layout.RqLayout.abandon_jobs_of_dead_worker` for the launcher and the
reaper). A process dying between the mark and the enqueue loses nothing: the mark says
``queued`` under a job id RQ does not know, and the reaper queues that job
(:func:`reap_turns`). See docs/architecture.md, "Resume after a crash", "Turns".
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rq.job import JobStatus

from bot.agent.turn import turn_lost, turn_stopped
from bot.deps import Deps
from bot.observe import record as observed
from bot.store.jobs import TurnJob
from bot.store.turn_attempts import LOST, QUEUED, RUNNING, STOPPED, TurnVerdict

log = logging.getLogger(__name__)

_ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)


def recover_turn(
    deps: Deps, payload: dict[str, Any], *, dead_job: str, why: str, executing: bool = True
) -> TurnVerdict:
    """The turn of ``payload`` (a :class:`TurnJob`'s wire form) lost the worker executing
    it as ``dead_job``: queue its next attempt, or say it stopped or was lost.
    ``executing``: the noticer saw ``dead_job`` executing (RQ's ``started``), so a turn
    neither in flight nor done was killed before it began (the reaper knows only what is
    in flight: False)."""
    job = TurnJob.model_validate(payload)
    got = deps.turn_attempts.decide(
        job.reply_key,
        dead_job=dead_job,
        stop_flag=deps.keys.turn_stop(job.session_key),
        max_resumes=deps.settings.subagents.max_resumes,
        why=why,
        payload=payload if executing else None,
    )
    if got.verdict is TurnVerdict.RESUMED:
        _enqueue(deps, got.payload or payload, attempt=got.attempt, job_id=got.job_id)
        log.warning("turn %s resumed in attempt %d (%s)", job.reply_key, got.attempt, why)
        observed.resumed(deps, "turn", "resumed")
    elif got.verdict is TurnVerdict.STOPPED:
        turn_stopped(deps, job)
        observed.resumed(deps, "turn", "stopped")
    elif got.verdict is TurnVerdict.EXHAUSTED:
        log.warning("turn %s lost: its worker died %d times (%s)", job.reply_key, got.attempt, why)
        turn_lost(deps, job, deaths=got.attempt)
        observed.resumed(deps, "turn", "exhausted")
    return got.verdict


def _enqueue(deps: Deps, payload: dict[str, Any], *, attempt: int, job_id: str) -> None:
    turn = TurnJob.model_validate({**payload, "attempt": attempt})
    deps.jobs.enqueue_turn(turn, job_id=job_id, timeout=deps.settings.turn_timeout_seconds)


def reap_turns(deps: Deps, *, now: float | None = None) -> list[str]:
    """Maintenance (only while Redis is steady): turns in flight whose worker is gone.
    A running turn whose lease lapsed is recovered and its dead job failed (which frees its
    lane); a turn marked for its next attempt whose job RQ never got is queued; one whose
    queued job ended without starting it is recovered again; one whose closing line was
    decided but not written gets it. Returns the reply keys acted on."""
    now = time.time() if now is None else now
    stale = deps.settings.subagents.stale_after_seconds
    acted = []
    for entry in deps.turn_attempts.in_flight():
        if now - entry.since < stale:
            continue
        job = TurnJob.model_validate(entry.payload)
        if entry.state == RUNNING:
            if deps.turn_attempts.lease_alive(entry.reply_key):
                continue
            why = f"its worker stopped responding (no lease for {stale:g}s)"
            recover_turn(deps, entry.payload, dead_job=entry.job_id, why=why, executing=False)
            _abandon(deps, entry.job_id)
        elif entry.state == QUEUED:
            status = deps.jobs.status(entry.job_id)
            if status is None:  # marked, but its enqueue was lost with its noticer
                _enqueue(deps, entry.payload, attempt=entry.attempt, job_id=entry.job_id)
                log.warning("turn %s: queued its lost attempt %d", entry.reply_key, entry.attempt)
            elif status in _ENDED:
                why = f"its attempt {entry.attempt} ended before it started ({status})"
                recover_turn(deps, entry.payload, dead_job=entry.job_id, why=why, executing=False)
            else:
                continue
        elif entry.state == STOPPED:
            turn_stopped(deps, job)
        elif entry.state == LOST:
            turn_lost(deps, job, deaths=entry.attempt)
        else:
            continue
        acted.append(entry.reply_key)
    return acted


def _abandon(deps: Deps, job_id: str) -> None:
    """RQ fails the dead job now (not when its execution expires), freeing its lane."""
    job = deps.jobs.fetch(job_id)
    if job is not None and job.get_status(refresh=False) is JobStatus.STARTED:
        deps.rq.abandon_jobs_of_dead_worker([job], now=time.time())
