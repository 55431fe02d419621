"""Spawning a run: validate what was asked, write the run record, enqueue its job.

Model and thinking resolve as: the request -> the type's model -> the agent's subagent
default -> the global default. An unknown model warns and falls back; a bad thinking value
or an unknown type is an error (:class:`~bot.errors.SpawnRejected`). Whoever spawns (the
main agent's ``sessions_spawn`` tool, later a chat command) builds a
:class:`SpawnRequest`; the lifecycle does the rest.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bot.config import THINKING_LEVELS, Settings
from bot.deps import Deps
from bot.errors import SpawnRejected
from bot.runs.catalog import subagent_types
from bot.sessions import new_child_session_key
from bot.store.jobs import RunJobSpec
from bot.types import Cleanup, RunRecord, ThreadRef

KnownModels = Callable[[], frozenset[str] | None]
"""Asked only when a model is requested: the models the endpoint knows (None: unknown)."""


@dataclass(frozen=True, kw_only=True)
class SpawnRequest:
    """One run to start, as the spawner asked for it.

    Attributes:
        task: What the subagent must do (already validated as non-empty and bounded).
        session_key: The requester session the run belongs to.
        thread: Where its announce goes.
        requester: ``platform:user_id`` of the person whose message started the work.
        agent_id: The agent that owns the run.
        label: Short name for the thread ("" = use the task).
        subagent_type: Type name; None = ``general-purpose``.
        model: Requested model, if any.
        thinking: Requested reasoning effort, if any.
        timeout_s: Run timeout; None = the configured default.
        cleanup: Whether the child session is archived at once when it ends.
    """

    task: str
    session_key: str
    thread: ThreadRef
    requester: str
    agent_id: str
    label: str = ""
    subagent_type: str | None = None
    model: str | None = None
    thinking: str | None = None
    timeout_s: int | None = None
    cleanup: Cleanup = Cleanup.KEEP


def spawn_run(deps: Deps, request: SpawnRequest, *, known_models: KnownModels) -> RunRecord:
    """Validate ``request``, record the run and enqueue it; returns the queued record."""
    s = deps.settings
    types = subagent_types(s)
    type_name = request.subagent_type or "general-purpose"
    if type_name not in types:
        raise SpawnRejected(f"unknown subagent_type {type_name!r}; available: {', '.join(types)}")
    thinking = resolve_thinking(s, request.agent_id, request.thinking)
    model, warnings = resolve_model(
        s, request.agent_id, request.model or types[type_name].model, known_models
    )
    record = _new_record(deps, request, type_name, model, thinking, warnings)
    deps.runs.create(record)
    enqueue_run(deps, record)
    return record


def resolve_model(
    settings: Settings, agent_id: str, requested: str | None, known_models: KnownModels
) -> tuple[str, list[str]]:
    """Pick the run's model; an unknown requested model falls back with a warning."""
    s = settings
    default = s.agent(agent_id).subagent_model or s.subagents.model or s.openai.model
    if not requested:
        return default, []
    configured = {s.openai.model, *s.openai.models, *s.prices}
    configured |= {m for m in (s.subagents.model,) if m}
    configured |= {t.model for t in s.subagent_types if t.model}
    if requested in configured:
        return requested, []
    listed = None if s.openai.models else known_models()
    if listed is None and not s.openai.models:
        return requested, []  # nothing to check against: trust the request
    if requested in (listed or frozenset()):
        return requested, []
    return default, [f"unknown model {requested!r}; using {default!r}"]


def resolve_thinking(settings: Settings, agent_id: str, requested: str | None) -> str:
    value = requested or settings.agent(agent_id).subagent_thinking or settings.subagents.thinking
    if value and value not in THINKING_LEVELS:
        raise SpawnRejected(f"thinking must be one of {', '.join(THINKING_LEVELS)}, not {value!r}")
    return value or ""


def _new_record(
    deps: Deps,
    request: SpawnRequest,
    type_name: str,
    model: str,
    thinking: str,
    warnings: list[str],
) -> RunRecord:
    run_id = uuid.uuid4().hex
    return RunRecord(
        run_id=run_id,
        seq=deps.runs.next_seq(request.session_key),
        session_key=request.session_key,
        child_session_key=new_child_session_key(request.agent_id),
        session_id=uuid.uuid4().hex,
        thread=request.thread,
        requester=request.requester,
        agent_id=request.agent_id,
        subagent_type=type_name,
        task=request.task,
        label=request.label.strip(),
        model=model,
        thinking=thinking,
        timeout_s=request.timeout_s or deps.settings.subagents.run_timeout_seconds,
        cleanup=request.cleanup,
        created_at=time.time(),
        job_id=run_id,
        warnings=tuple(warnings),
    )


def enqueue_run(deps: Deps, record: RunRecord) -> None:
    """Put a recorded run on the ``subagents`` queue under the concurrency limit."""
    sub = deps.settings.subagents
    deps.jobs.enqueue_run(
        RunJobSpec(
            run_id=record.job_id,
            timeout=record.timeout_s + sub.job_grace_seconds,
            max_concurrent=sub.max_concurrent,
            description=f"subagent #{record.seq} {record.label or record.task[:40]}",
        )
    )
