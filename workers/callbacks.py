"""Backup finalizers: RQ calls these when a job fails, is stopped, or its horse dies; the
launcher calls :func:`worker_died` when a worker process itself dies.

The job normally finalizes its own run; these only act when it could not (hard timeout,
hard stop, crash). Finalize is idempotent, so a repeat is harmless.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from typing import Any

from redis import Redis
from rq.job import Job, JobStatus
from rq.timeouts import JobTimeoutException

from bot.agent.turn import turn_stopped as commit_turn_stopped
from bot.agent.turn import turn_timed_out as commit_turn_timed_out
from bot.agent.turn_recover import recover_turn
from bot.config import load_settings
from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.runs.recover import recover_run
from bot.store.jobs import SUBAGENTS_QUEUE, TURNS_QUEUE, TurnJob
from bot.supervise.abort import Abort
from bot.types import RunStatus

log = logging.getLogger(__name__)


def _finalize(job: Job, connection: Redis, status: RunStatus, notes: str) -> bool:
    deps = Deps.build(load_settings(), client=connection)
    return _end(deps, _run_of(job), status, notes, job_id=job.id)


def _end(
    deps: Deps, run_id: str, status: RunStatus, notes: str, *, job_id: str = "", **partial: Any
) -> bool:
    """End ``run_id`` on behalf of its job ``job_id`` ("" = whichever); ``partial``: what
    the run did so far (result, usage, tools), where known. A job whose run went on in a
    later attempt (its worker was taken for lost, bot.runs.recover) ends nothing."""
    if job_id and _superseded(deps, run_id, job_id):
        log.info("job %s no longer executes run %s; not ended for it", job_id, run_id)
        return False
    if status is not RunStatus.STOPPED and deps.runs.stop_requested(run_id):
        status, notes = RunStatus.STOPPED, "stopped on request (hard stop)"
    return finalize_run(deps, run_id, status=status, notes=notes, **partial)


def _superseded(deps: Deps, run_id: str, job_id: str) -> bool:
    """Whether a later attempt's job executes ``run_id`` in place of ``job_id``."""
    record = deps.runs.get(run_id)
    return (
        record is not None
        and record.attempt > 1
        and bool(record.executor)
        and record.executor != job_id
    )


def subagent_failed(job: Job, connection: Redis, exc_type: Any, value: Any, tb: Any) -> None:
    if isinstance(value, JobTimeoutException):
        status, notes = RunStatus.TIMEOUT, "job time limit reached (hard limit)"
    else:
        status, notes = RunStatus.ERROR, f"{getattr(exc_type, '__name__', exc_type)}: {value}"
    _finalize(job, connection, status, notes)


def subagent_stopped(job: Job, connection: Redis) -> None:
    _finalize(job, connection, RunStatus.STOPPED, "stopped on request (hard stop)")


def _run_of(job: Job) -> str:
    """The run a subagent job executes: its id, or a resume job's first argument."""
    return str(job.args[0]) if job.args and isinstance(job.args[0], str) else job.id


def _turn_payload(job: Job) -> dict[str, Any] | None:
    """A turn job's :class:`TurnJob` wire payload (None: not a turn's)."""
    return job.args[0] if job.args and isinstance(job.args[0], dict) else None


def turn_stopped(job: Job, connection: Redis) -> None:
    """A turn was hard-stopped: post the closing line it could not."""
    payload = _turn_payload(job)
    if payload is None:
        return
    deps = Deps.build(load_settings(), client=connection)
    commit_turn_stopped(deps, TurnJob.model_validate(payload))


def horse_killed(job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
    """The work horse died (SIGKILL, OOM...): ``on_failure`` will not fire, so its run
    goes on in a new attempt (or ends) here (bot.runs.recover); its turn too
    (bot.agent.turn_recover: the new attempt waits in the turn's lane, which RQ's failure
    handling of this job frees right after). A horse RQ's monitor killed past its hard
    time limit (a minute after it, where the horse's own limit could not act) ends as a
    timeout instead: a new attempt would only take too long again."""
    if _past_hard_limit(job):
        _hard_limit_reached(job)
        return
    if job.origin == TURNS_QUEUE:
        payload = _turn_payload(job)
        if payload is not None:
            log.warning("work horse for turn job %s died (status %s)", job.id, ret_val)
            deps = Deps.build(load_settings(), client=job.connection)
            recover_turn(
                deps, payload, dead_job=job.id, why=f"worker process died (exit {ret_val})"
            )
        return
    if job.origin != SUBAGENTS_QUEUE:
        return
    run_id = _run_of(job)
    log.warning("work horse for run %s died (status %s)", run_id, ret_val)
    deps = Deps.build(load_settings(), client=job.connection)
    recover_run(deps, run_id, dead_job=job.id, why=f"worker process died (exit {ret_val})")


def _past_hard_limit(job: Job) -> bool:
    """Whether ``job`` ran longer than its RQ time limit (its horse was killed for it)."""
    started = job.started_at
    if started is None or job.timeout is None or job.timeout < 0:
        return False
    if started.tzinfo is None:
        started = started.replace(tzinfo=datetime.UTC)  # RQ stores UTC without saying so
    return (datetime.datetime.now(datetime.UTC) - started).total_seconds() > job.timeout


def _hard_limit_reached(job: Job) -> None:
    log.warning("work horse for job %s killed past its time limit", job.id)
    deps = Deps.build(load_settings(), client=job.connection)
    if job.origin == SUBAGENTS_QUEUE:
        _end(deps, _run_of(job), RunStatus.TIMEOUT, "job time limit reached (hard limit)",
             job_id=job.id)  # fmt: skip
        return
    payload = _turn_payload(job)
    if job.origin == TURNS_QUEUE and payload is not None:
        commit_turn_timed_out(deps, TurnJob.model_validate(payload))


def fence_job(worker: Any, job: Job, execution: Any, deps: Deps, *, abort: Abort) -> None:
    """End a job whose run did not end after its ``abort`` (a stop, its soft deadline or
    its hard time limit; threads pool, see :mod:`workers.threaded`): RQ's side (``stopped``
    or ``failed``, its execution gone, its rate-limit slot freed) and fanbot's (the run
    ended ``stopped`` or ``timeout`` with what it did so far; a turn's closing line
    posted). The run's thread may still finish later; its finalizers then find nothing to
    do."""
    timed_out = abort.timed_out or abort.past_deadline
    partial = abort.partial()
    with worker.connection.pipeline() as pipe:
        job.set_status(JobStatus.FAILED if timed_out else JobStatus.STOPPED, pipeline=pipe)
        worker.cleanup_execution(job, pipeline=pipe, execution=execution)
        pipe.execute()
    worker._release_slot_safely(job)  # RQ's own slot release, as on a failure
    if job.origin == SUBAGENTS_QUEUE:
        if timed_out:
            _end(deps, _run_of(job), RunStatus.TIMEOUT, abort.reason, job_id=job.id, **partial)
        else:
            note = "stopped on request (it did not end after the stop, so it was fenced)"
            _end(deps, _run_of(job), RunStatus.STOPPED, note, job_id=job.id, **partial)
        return
    payload = job.args[0] if job.args and isinstance(job.args[0], dict) else None
    if payload is None:
        return
    turn = TurnJob.model_validate(payload)
    if timed_out:
        commit_turn_timed_out(deps, turn)
    else:
        commit_turn_stopped(deps, turn)


def worker_died(deps: Deps, pid: int) -> list[str]:
    """Worker process ``pid`` (a child of this launcher, so of this host) died: every run
    it executed goes on in a new attempt now (or ends: bot.runs.recover), if nothing of its
    session lives on, rather than when the runs' heartbeats expire. A fork-pool horse keeps
    the worker's session; a horse still running (only the worker was killed) goes on
    itself. In the threads pool the process held up to its concurrency of runs, all
    resumed here. Its turns go on in new attempts (bot.agent.turn_recover). Returns the runs and turn
    jobs resumed or ended."""
    ended: list[str] = []
    try:
        jobs = deps.rq.current_jobs(pid=pid, host=socket.gethostname())
        if not jobs or _session_alive(pid):
            return []
        # A job it popped but had not started yet (killed in between) is the repair
        # sweep's: still queued, it goes back to its queue (workers/repair.py).
        jobs = [job for job in jobs if job.get_status(refresh=False) is JobStatus.STARTED]
        why = f"worker process died (pid {pid})"
        for job in jobs:
            run_id = deps.jobs.current_run_id(job)
            if run_id is not None and recover_run(deps, run_id, dead_job=job.id, why=why).verdict:
                ended.append(run_id)
        # Its turns too: each goes on in a new attempt queued in its thread's lane (or its
        # thread hears it was lost: bot.agent.turn_recover); RQ fails the dead jobs now,
        # which frees those lanes for the new attempts.
        for job in jobs:
            payload = _turn_payload(job) if job.origin == TURNS_QUEUE else None
            if payload is not None and recover_turn(deps, payload, dead_job=job.id, why=why):
                ended.append(job.id)
        deps.rq.abandon_jobs_of_dead_worker(jobs, now=time.time())
    except Exception:  # the reaper still ends them when their heartbeats expire
        log.exception("could not end the runs of dead worker pid %s", pid)
        return ended
    if ended:
        log.warning("worker pid %s died with %d run(s) (%s); resumed or ended", pid, len(ended),
                    ", ".join(ended[:5]))  # fmt: skip
    return ended


def _session_alive(sid: int) -> bool:
    """Whether a live (not zombie) process is in session ``sid``."""
    import psutil

    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False
