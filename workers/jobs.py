"""RQ job entry points. Each takes and returns JSON-able data.

The worker launcher calls :func:`warm_up` once in each RQ worker process, so every forked
work horse inherits ready dependencies: the stores and the model client (whose TLS set-up
alone costs a few hundred milliseconds per job otherwise). Without it, a job builds its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bot.agent.llm import ChatModel
from bot.agent.subagent import SubagentBody
from bot.agent.turn import execute_turn
from bot.config import Settings, load_settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.store.jobs import TurnJob

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Worked:
    """What a job needs: the stores and the model client."""

    deps: Deps
    model: ChatModel

    @classmethod
    def build(cls, settings: Settings) -> Worked:
        return cls(deps=Deps.build(settings), model=ChatModel(settings=settings.openai))

    def close(self) -> None:
        self.model.close()
        self.deps.close()


_warm: list[Worked] = []


def warm_up(settings: Settings) -> Deps:
    """Build the dependencies once in the worker process, before any horse forks."""
    _warm[:] = [Worked.build(settings)]
    return _warm[0].deps


@contextmanager
def _worked() -> Iterator[Worked]:
    if _warm:
        yield _warm[0]  # a forked copy in this horse; redis-py reconnects after fork
        return
    built = Worked.build(load_settings())
    try:
        yield built
    finally:
        built.close()


def run_turn(payload: dict[str, Any]) -> dict[str, Any]:
    """Main-agent turn for one inbound message (queue ``turns``)."""
    job = TurnJob.model_validate(payload)
    with _worked() as w:
        text = execute_turn(w.deps, w.model, job)
    return {"session_key": job.session_key, "chars": len(text)}


def run_subagent(run_id: str) -> dict[str, Any]:
    """One subagent run (queue ``subagents``); the run hash holds the truth."""
    with _worked() as w:
        status = execute_run(w.deps, run_id, SubagentBody(deps=w.deps, model=w.model))
    return {"run_id": run_id, "status": status}
