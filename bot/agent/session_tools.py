"""The main agent's session tools: spawn subagents, list them, list agents and types."""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, Field

from bot.agent.context import ToolContext
from bot.agent.spawn import SpawnArgs, spawn
from bot.agent.subagent_types import subagent_types
from bot.agent.tools import NoArgs, Tool


class ListArgs(BaseModel):
    limit: int = Field(20, ge=1, le=100)


def _spawn(ctx: ToolContext, args: SpawnArgs) -> str:
    return json.dumps(spawn(ctx, args))


def _list(ctx: ToolContext, args: ListArgs) -> str:
    now = time.time()
    runs = ctx.deps.runs.session_runs(ctx.session_key)[: args.limit]
    items = [
        {
            "number": r.seq,
            "runId": r.run_id,
            "label": r.label,
            "task": r.task[:200],
            "type": r.subagent_type,
            "status": r.status.value,
            "ageSeconds": int(now - r.created_at),
            "childSessionKey": r.child_session_key,
            "result": r.result[:500] if r.status.terminal else None,
        }
        for r in runs
    ]
    return json.dumps({"runs": items, "count": len(items)})


def _agents(ctx: ToolContext, args: NoArgs) -> str:
    s = ctx.deps.settings
    types = [
        {"name": t.name, "description": t.description, "model": t.model}
        for t in subagent_types(s).values()
    ]
    agents = sorted({ctx.agent_id, *s.agents})
    return json.dumps({"agents": agents, "subagent_types": types})


SPAWN_DESCRIPTION = (
    "Start a background subagent for a self-contained task. It runs in isolation with only "
    "the task as context and announces its result in this thread when done. Returns at "
    "once with a runId; call it several times in one response to run tasks in parallel."
)

SESSION_TOOLS_LIST: tuple[Tool, ...] = (
    Tool(name="sessions_spawn", description=SPAWN_DESCRIPTION, args=SpawnArgs, run=_spawn),
    Tool(
        name="sessions_list",
        description="List the subagent runs spawned from this conversation, newest first.",
        args=ListArgs,
        run=_list,
    ),
    Tool(
        name="agents_list",
        description="List the agents and subagent types you can spawn.",
        args=NoArgs,
        run=_agents,
    ),
)
