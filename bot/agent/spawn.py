"""``sessions_spawn``: the main agent's way to start a subagent run.

The tool validates the model's arguments (:class:`SpawnArgs`), applies the per-turn rules
(no nesting, a bounded number of spawns per turn) and hands the rest to the run lifecycle
(:func:`bot.runs.spawn.spawn_run`), answering at once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from bot.agent.context import ToolContext
from bot.errors import SpawnRejected
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.types import Cleanup


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


def spawn(ctx: ToolContext, args: SpawnArgs) -> dict[str, object]:
    """Create and enqueue one subagent run; returns the tool's JSON-able answer."""
    s = ctx.deps.settings
    if ctx.run_id is not None:
        raise SpawnRejected("subagents cannot spawn subagents")
    if len(ctx.spawned) >= s.subagents.max_spawns_per_turn:
        raise SpawnRejected(f"at most {s.subagents.max_spawns_per_turn} spawns per turn")
    agent_id = args.agentId or ctx.agent_id
    if agent_id != ctx.agent_id and agent_id not in s.agents:
        raise SpawnRejected(f"unknown agentId {agent_id!r}; known: {ctx.agent_id}")
    request = SpawnRequest(
        task=args.task,
        session_key=ctx.session_key,
        thread=ctx.thread,
        requester=ctx.requester,
        agent_id=agent_id,
        label=args.label or "",
        subagent_type=args.subagent_type,
        model=args.model,
        thinking=args.thinking,
        timeout_s=args.runTimeoutSeconds,
        cleanup=Cleanup(args.cleanup),
    )
    record = spawn_run(ctx.deps, request, known_models=ctx.known_models)
    ctx.spawned.append(record.run_id)
    answer: dict[str, object] = {
        "status": "accepted",
        "runId": record.run_id,
        "childSessionKey": record.child_session_key,
        "number": record.seq,
    }
    if record.warnings:
        answer["warnings"] = list(record.warnings)
    return answer
