"""RQ job entry points. Each takes and returns JSON-able data and builds its own deps."""

from __future__ import annotations

import logging
from typing import Any

from bot.config import load_settings
from bot.deps import Deps
from bot.subagent_run import execute_run
from bot.turn import TurnJob, execute_turn

log = logging.getLogger(__name__)


def run_turn(payload: dict[str, Any]) -> dict[str, Any]:
    """Main-agent turn for one inbound message (queue ``turns``)."""
    job = TurnJob.model_validate(payload)
    deps = Deps.build(load_settings())
    try:
        text = execute_turn(deps, job)
    finally:
        deps.close()
    return {"session_key": job.session_key, "chars": len(text)}


def run_subagent(run_id: str) -> dict[str, Any]:
    """One subagent run (queue ``subagents``); the run hash holds the truth."""
    deps = Deps.build(load_settings())
    try:
        status = execute_run(deps, run_id)
    finally:
        deps.close()
    return {"run_id": run_id, "status": status}
