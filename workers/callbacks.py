"""Backup finalizers: RQ calls these when a job fails, is stopped, or its horse dies.

The job normally finalizes its own run; these only act when it could not (hard timeout,
hard stop, crash). Finalize is idempotent, so a repeat is harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis
from rq.job import Job
from rq.timeouts import JobTimeoutException

from bot.config import load_settings
from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.types import RunStatus

log = logging.getLogger(__name__)


def _finalize(connection: Redis, run_id: str, status: RunStatus, notes: str) -> bool:
    deps = Deps.build(load_settings(), client=connection)
    if status is not RunStatus.STOPPED and deps.runs.stop_requested(run_id):
        status, notes = RunStatus.STOPPED, "stopped on request (hard stop)"
    return finalize_run(deps, run_id, status=status, notes=notes)


def subagent_failed(job: Job, connection: Redis, exc_type: Any, value: Any, tb: Any) -> None:
    if isinstance(value, JobTimeoutException):
        status, notes = RunStatus.TIMEOUT, "job time limit reached (hard limit)"
    else:
        status, notes = RunStatus.ERROR, f"{getattr(exc_type, '__name__', exc_type)}: {value}"
    _finalize(connection, job.id, status, notes)


def subagent_stopped(job: Job, connection: Redis) -> None:
    _finalize(connection, job.id, RunStatus.STOPPED, "stopped on request (hard stop)")


def horse_killed(job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
    """The work horse died (SIGKILL, OOM...): ``on_failure`` will not fire, so end it here."""
    if job.origin != SUBAGENTS_QUEUE:
        return
    log.warning("work horse for run %s died (status %s)", job.id, ret_val)
    _finalize(job.connection, job.id, RunStatus.UNKNOWN, f"worker process died (exit {ret_val})")
