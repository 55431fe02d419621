"""Backup finalizers: RQ calls these when a job fails, is stopped, or its horse dies; the
launcher calls :func:`worker_died` when a worker process itself dies.

The job normally finalizes its own run; these only act when it could not (hard timeout,
hard stop, crash). Finalize is idempotent, so a repeat is harmless.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from redis import Redis
from rq.job import Job
from rq.timeouts import JobTimeoutException

from bot.agent.turn import turn_stopped as commit_turn_stopped
from bot.config import load_settings
from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.store.jobs import SUBAGENTS_QUEUE, TurnJob
from bot.types import RunStatus

log = logging.getLogger(__name__)


def _finalize(connection: Redis, run_id: str, status: RunStatus, notes: str) -> bool:
    return _end(Deps.build(load_settings(), client=connection), run_id, status, notes)


def _end(deps: Deps, run_id: str, status: RunStatus, notes: str) -> bool:
    if status is not RunStatus.STOPPED and deps.runs.stop_requested(run_id):
        status, notes = RunStatus.STOPPED, "stopped on request (hard stop)"
    return finalize_run(deps, run_id, status=status, notes=notes)


def subagent_failed(job: Job, connection: Redis, exc_type: Any, value: Any, tb: Any) -> None:
    if isinstance(value, JobTimeoutException):
        status, notes = RunStatus.TIMEOUT, "job time limit reached (hard limit)"
    else:
        status, notes = RunStatus.ERROR, f"{getattr(exc_type, '__name__', exc_type)}: {value}"
    _finalize(connection, _run_of(job), status, notes)


def subagent_stopped(job: Job, connection: Redis) -> None:
    _finalize(connection, _run_of(job), RunStatus.STOPPED, "stopped on request (hard stop)")


def _run_of(job: Job) -> str:
    """The run a subagent job executes: its id, or a resume job's first argument."""
    return str(job.args[0]) if job.args and isinstance(job.args[0], str) else job.id


def turn_stopped(job: Job, connection: Redis) -> None:
    """A turn was hard-stopped: post the closing line it could not."""
    payload = job.args[0] if job.args and isinstance(job.args[0], dict) else None
    if payload is None:
        return
    deps = Deps.build(load_settings(), client=connection)
    commit_turn_stopped(deps, TurnJob.model_validate(payload))


def horse_killed(job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
    """The work horse died (SIGKILL, OOM...): ``on_failure`` will not fire, so end it here."""
    if job.origin != SUBAGENTS_QUEUE:
        return
    run_id = _run_of(job)
    log.warning("work horse for run %s died (status %s)", run_id, ret_val)
    _finalize(job.connection, run_id, RunStatus.UNKNOWN, f"worker process died (exit {ret_val})")


def worker_died(deps: Deps, pid: int) -> str | None:
    """Worker process ``pid`` (a child of this launcher, so of this host) died: end its run
    ``unknown`` now if nothing of its session lives on, rather than when the run's
    heartbeat expires. Its horse keeps the worker's session; a horse still running (only
    the worker was killed) ends the run itself. Returns the run ended, if any."""
    try:
        run_id = _current_run(deps, pid)
        if run_id is None or _session_alive(pid):
            return None
        if not _end(deps, run_id, RunStatus.UNKNOWN, f"worker process died (pid {pid})"):
            return None
    except Exception:  # the reaper still ends it when its heartbeat expires
        log.exception("could not end the run of dead worker pid %s", pid)
        return None
    log.warning("worker pid %s died with run %s; ended unknown", pid, run_id)
    return run_id


def _current_run(deps: Deps, pid: int) -> str | None:
    """The run of the RQ worker with ``pid`` on this host (hostname and, where Redis saw
    one, address: containers may share a hostname and pids)."""
    job = deps.rq.current_job(pid=pid, host=socket.gethostname())
    return deps.jobs.current_run_id(job) if job is not None else None


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
