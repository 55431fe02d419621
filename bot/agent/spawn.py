"""``sessions_spawn``: validate, record the run, enqueue it, answer at once.

Model and thinking resolve as: spawn parameter -> the agent's subagent default -> the
global default. An unknown model warns and falls back; a bad thinking value is an error.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, Field, field_validator
from rq import Callback
from rq.rate_limit import RateLimit

from bot.agent.context import ToolContext
from bot.agent.subagent_types import subagent_types
from bot.config import THINKING_LEVELS, Settings
from bot.deps import SUBAGENT_SLOT_KEY, SUBAGENTS_QUEUE, Deps
from bot.errors import SpawnRejected
from bot.sessions import new_child_session_key
from bot.types import Cleanup, RunRecord

RUN_JOB = "workers.jobs.run_subagent"


class SpawnArgs(BaseModel):
    """Parameters of ``sessions_spawn`` as the model sends them."""

    task: str = Field(description="What the subagent must do; it sees nothing else.")
    label: str | None = Field(None, max_length=80, description="Short name for the thread.")
    agentId: str | None = Field(None, description="Agent that owns the run (default: you).")
    subagent_type: str | None = Field(None, description="Which subagent type runs the task.")
    model: str | None = Field(None, description="Model override.")
    thinking: str | None = Field(None, description="off|minimal|low|medium|high")
    runTimeoutSeconds: int | None = Field(None, ge=1, le=86_400)
    cleanup: Literal["keep", "delete"] = "keep"

    @field_validator("task")
    @classmethod
    def _task(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("task is empty; describe the work for the subagent")
        if len(value) > 20_000:
            raise ValueError("task is longer than 20000 characters")
        return value


def resolve_model(deps: Deps, agent_id: str, requested: str | None) -> tuple[str, list[str]]:
    """Pick the run's model; an unknown requested model falls back with a warning."""
    s = deps.settings
    agent = s.agent(agent_id)
    default = agent.subagent_model or s.subagents.model or s.openai.model
    if not requested:
        return default, []
    known = _known_models(deps)
    if known is None or requested in known:
        return requested, []
    return default, [f"unknown model {requested!r}; using {default!r}"]


def _known_models(deps: Deps) -> frozenset[str] | None:
    s = deps.settings
    configured = {s.openai.model, *s.openai.models, *s.prices}
    configured |= {m for m in (s.subagents.model,) if m}
    configured |= {t.model for t in s.subagent_types if t.model}
    listed = deps.model.known_models() if not s.openai.models else None
    if listed is None and not s.openai.models:
        return None
    return frozenset(configured | set(listed or ()))


def resolve_thinking(settings: Settings, agent_id: str, requested: str | None) -> str:
    value = requested or settings.agent(agent_id).subagent_thinking or settings.subagents.thinking
    if value and value not in THINKING_LEVELS:
        raise SpawnRejected(f"thinking must be one of {', '.join(THINKING_LEVELS)}, not {value!r}")
    return value or ""


def spawn(ctx: ToolContext, args: SpawnArgs) -> dict[str, object]:
    """Create and enqueue one subagent run; returns the tool's JSON-able answer."""
    deps, s = ctx.deps, ctx.deps.settings
    if ctx.run_id is not None:
        raise SpawnRejected("subagents cannot spawn subagents")
    if len(ctx.spawned) >= s.subagents.max_spawns_per_turn:
        raise SpawnRejected(f"at most {s.subagents.max_spawns_per_turn} spawns per turn")
    agent_id = args.agentId or ctx.agent_id
    if agent_id != ctx.agent_id and agent_id not in s.agents:
        raise SpawnRejected(f"unknown agentId {agent_id!r}; known: {ctx.agent_id}")
    types = subagent_types(s)
    type_name = args.subagent_type or "general-purpose"
    if type_name not in types:
        raise SpawnRejected(f"unknown subagent_type {type_name!r}; available: {', '.join(types)}")
    thinking = resolve_thinking(s, agent_id, args.thinking)
    model, warnings = resolve_model(deps, agent_id, args.model or types[type_name].model)
    record = _new_record(ctx, args, agent_id, type_name, model, thinking, warnings)
    deps.runs.create(record)
    enqueue_run(deps, record)
    ctx.spawned.append(record.run_id)
    answer: dict[str, object] = {
        "status": "accepted",
        "runId": record.run_id,
        "childSessionKey": record.child_session_key,
        "number": record.seq,
    }
    if warnings:
        answer["warnings"] = warnings
    return answer


def _new_record(
    ctx: ToolContext,
    args: SpawnArgs,
    agent_id: str,
    type_name: str,
    model: str,
    thinking: str,
    warnings: list[str],
) -> RunRecord:
    s = ctx.deps.settings
    run_id = uuid.uuid4().hex
    return RunRecord(
        run_id=run_id,
        seq=ctx.deps.runs.next_seq(ctx.session_key),
        session_key=ctx.session_key,
        child_session_key=new_child_session_key(agent_id),
        session_id=uuid.uuid4().hex,
        thread=ctx.thread,
        requester=ctx.requester,
        agent_id=agent_id,
        subagent_type=type_name,
        task=args.task,
        label=(args.label or "").strip(),
        model=model,
        thinking=thinking,
        timeout_s=args.runTimeoutSeconds or s.subagents.run_timeout_seconds,
        cleanup=Cleanup(args.cleanup),
        created_at=time.time(),
        job_id=run_id,
        warnings=tuple(warnings),
    )


def enqueue_run(deps: Deps, record: RunRecord) -> None:
    """Put a recorded run on the ``subagents`` queue under the concurrency limit."""
    deps.queue(SUBAGENTS_QUEUE).enqueue(
        RUN_JOB,
        record.run_id,
        job_id=record.job_id,
        job_timeout=record.timeout_s + deps.settings.subagents.job_grace_seconds,
        rate_limit=RateLimit(SUBAGENT_SLOT_KEY, deps.settings.subagents.max_concurrent),
        on_failure=Callback("workers.callbacks.subagent_failed"),
        on_stopped=Callback("workers.callbacks.subagent_stopped"),
        result_ttl=3600,
        failure_ttl=86_400,
        description=f"subagent #{record.seq} {record.label or record.task[:40]}",
    )
