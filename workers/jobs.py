"""RQ job entry points. Each takes and returns JSON-able data.

The worker launcher calls :func:`warm_up` once in each RQ worker process, so every forked
work horse inherits ready dependencies (the model client's TLS set-up alone costs a few
hundred milliseconds per job otherwise). Without it, a job builds its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bot.config import Settings, load_settings
from bot.deps import Deps
from bot.subagent_run import execute_run
from bot.turn import TurnJob, execute_turn

log = logging.getLogger(__name__)

_warm: list[Deps] = []


def warm_up(settings: Settings) -> Deps:
    """Build the dependencies once in the worker process, before any horse forks."""
    _warm[:] = [Deps.build(settings)]
    return _warm[0]


@contextmanager
def _deps() -> Iterator[Deps]:
    if _warm:
        yield _warm[0]  # a forked copy in this horse; redis-py reconnects after fork
        return
    deps = Deps.build(load_settings())
    try:
        yield deps
    finally:
        deps.close()


def run_turn(payload: dict[str, Any]) -> dict[str, Any]:
    """Main-agent turn for one inbound message (queue ``turns``)."""
    job = TurnJob.model_validate(payload)
    with _deps() as deps:
        text = execute_turn(deps, job)
    return {"session_key": job.session_key, "chars": len(text)}


def run_subagent(run_id: str) -> dict[str, Any]:
    """One subagent run (queue ``subagents``); the run hash holds the truth."""
    with _deps() as deps:
        status = execute_run(deps, run_id)
    return {"run_id": run_id, "status": status}
