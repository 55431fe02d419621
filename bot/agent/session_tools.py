"""The main agent's session tools: spawn subagents, list them, read and message them, list
agents and types. ``sessions_history`` and ``sessions_send`` follow the chat commands' rules:
anyone in the session may read; only an admin or the run's requester (the person whose
message started this turn, ``ctx.requester``) may message a run.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache

from pydantic import BaseModel, Field

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, TypeList, spawn, spawn_args_for
from bot.agent.subagent_types import subagent_types
from bot.agent.tools import NoArgs, Tool
from bot.config import Settings
from bot.errors import ToolError
from bot.runs.access import Actor, may_control, may_read_tools, resolve_run
from bot.runs.logview import read_log
from bot.runs.send import send
from bot.types import RunRecord


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


class HistoryArgs(BaseModel):
    id: str = Field(
        min_length=1,
        max_length=200,
        description="Run: its number (as sessions_spawn returned it), 'last', a run-id "
        "prefix or the childSessionKey.",
    )
    limit: int = Field(20, ge=1, le=200, description="How many of the last messages.")
    tools: bool = Field(
        False, description="Also show tool calls and tool results (hidden by default)."
    )


class SendArgs(BaseModel):
    id: str = Field(min_length=1, max_length=200, description="Run, as for sessions_history.")
    message: str = Field(
        min_length=1,
        max_length=20_000,
        description="Text for the subagent: steers a running run; a finished run gets a "
        "follow-up run on the same session whose answer is announced in the thread.",
    )


def _resolve(ctx: ToolContext, token: str) -> RunRecord:
    found = resolve_run(token, ctx.deps.runs.session_runs(ctx.session_key))
    if found.run is None:
        raise ToolError(found.error.replace("`", ""))
    return found.run


def _history(ctx: ToolContext, args: HistoryArgs) -> str:
    run = _resolve(ctx, args.id)
    if args.tools:  # the rule `/subagents log … tools` follows, for whoever asked this turn
        asker = Actor.from_qualified(ctx.requester, ctx.deps.settings.admins)
        decision = may_read_tools(asker, run)
        if not decision.allowed:
            raise ToolError(decision.reason.replace("`", "") + " (ask again without tools)")
    transcripts = ctx.deps.transcripts
    key = transcripts.current_key(run.session_id, archived_at=run.archived_at)
    view = read_log(transcripts, key, limit=args.limit, tools=args.tools)
    items = [
        {k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id") if m.get(k)}
        for m in view.messages
    ]
    return json.dumps(
        {
            "number": run.seq,
            "runId": run.run_id,
            "status": run.status.value,
            "messages": items,
            "total": view.total,
        }
    )


def _send(ctx: ToolContext, args: SendArgs) -> str:
    run = _resolve(ctx, args.id)
    actor = Actor.from_qualified(ctx.requester, ctx.deps.settings.admins)
    decision = may_control(actor, run, verb="send to")
    if not decision.allowed:
        raise ToolError(f"{decision.reason} (requested by {ctx.requester})")
    result = send(ctx.deps, run, args.message, requester=ctx.requester)
    return json.dumps(
        {
            "status": result.outcome.value,
            "runId": result.run.run_id,
            "childSessionKey": result.run.child_session_key,
        }
    )


def _agents(ctx: ToolContext, args: NoArgs) -> str:
    s = ctx.deps.settings
    types = [
        {
            "name": t.name,
            "description": t.description,
            "model": t.model,
            "context": t.context,
            "compiled": t.runnable is not None,
            "structured": t.output_schema is not None,
        }
        for t in subagent_types(s).values()
    ]
    agents = sorted({ctx.agent_id, *s.agents})
    return json.dumps({"agents": agents, "subagent_types": types})


SPAWN_DESCRIPTION = (
    "Start a background subagent for a self-contained task. It runs in isolation with only "
    "the task as context (context=fork: also this conversation's recent messages) and "
    "announces its result in this thread when done. Returns at once with a runId; call it "
    "several times in one response to run tasks in parallel. Pick the subagent_type whose "
    "description fits the task."
)


def spawn_description(types: TypeList) -> str:
    """The spawn tool's description with each subagent type's name and description (as
    deepagents describes its ``task`` tool), so the model can choose one."""
    lines = [f"- {name}: {' '.join(text.split()) or '(no description)'}" for name, text in types]
    return SPAWN_DESCRIPTION + "\n\nAvailable subagent types (subagent_type):\n" + "\n".join(lines)


def spawn_tool(settings: Settings) -> Tool:
    """``sessions_spawn`` for ``settings``: its schema enumerates the subagent types."""
    return _spawn_tool(tuple((t.name, t.description) for t in subagent_types(settings).values()))


@lru_cache(maxsize=32)
def _spawn_tool(types: TypeList) -> Tool:
    return Tool(
        name="sessions_spawn",
        description=spawn_description(types),
        args=spawn_args_for(types),
        run=_spawn,
    )


SESSION_TOOLS_LIST: tuple[Tool, ...] = (
    Tool(
        name="sessions_spawn",
        description=SPAWN_DESCRIPTION,
        args=SpawnArgs,
        run=_spawn,
        configure=spawn_tool,
    ),
    Tool(
        name="sessions_list",
        description="List the subagent runs spawned from this conversation, newest first.",
        args=ListArgs,
        run=_list,
        repeat_safe=True,
    ),
    Tool(
        name="sessions_history",
        description="Read the transcript of one of this conversation's subagent runs.",
        args=HistoryArgs,
        run=_history,
        repeat_safe=True,
        untrusted_output=True,
    ),
    Tool(
        name="sessions_send",
        description="Send a message to one of this conversation's subagents (steer it, or "
        "follow up on a finished one). Only for the person who started it or an admin.",
        args=SendArgs,
        run=_send,
    ),
    Tool(
        name="agents_list",
        description="List the agents and subagent types you can spawn.",
        args=NoArgs,
        run=_agents,
        repeat_safe=True,
    ),
)
