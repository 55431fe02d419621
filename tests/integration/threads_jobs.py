"""Job functions for tests/integration/test_threads_pool.py (importable by RQ)."""

from __future__ import annotations

import os
import threading
import time

from rq import get_current_job

from bot.supervise import abort
from workers.context import current


def who(seconds: float) -> dict[str, object]:
    """Wait ``seconds``, then say which process, thread and context ran this job."""
    time.sleep(seconds)
    job = get_current_job()
    context = current()
    return {
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "job": job.id if job is not None else None,
        "served": context is not None,
    }


def wait_for_abort(seconds: float) -> str:
    """Wait up to ``seconds`` for this run's abort; say which came first."""
    mine = abort.current()
    assert mine is not None, "a threads-pool run has a current abort"
    return "aborted" if mine.wait(seconds) else "not aborted"


def ignore_abort(seconds: float) -> str:
    """A run that does not listen: sleeps through its stop."""
    time.sleep(seconds)
    return "slept"


def hold_redis(seconds: float) -> str:
    """Hold one of the worker's Redis connections for ``seconds`` (a blocking read)."""
    context = current()
    assert context is not None
    context.deps.redis.blpop(["threads-test:never"], timeout=seconds)
    return "held"
