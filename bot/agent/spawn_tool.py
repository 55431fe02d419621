"""``sessions_spawn``: the main agent's way to start a subagent run.

The tool validates the model's arguments (:class:`SpawnArgs`), applies the nesting rules
and hands the rest to the run lifecycle (:func:`bot.runs.spawn.spawn_run`), answering at
once; the spawns-per-turn and runs-per-person limits are decided there, the same for every
spawner (:mod:`bot.runs.quota`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model, field_validator

from bot.agent.context import ToolContext
from bot.errors import SpawnRejected
from bot.runs.estimate import Estimate, tool_answer
from bot.runs.join import may_nest, open_join
from bot.runs.spawn import SpawnRequest, check_agent, spawn_run
from bot.types import Cleanup, RunContext, RunRecord


class SpawnArgs(BaseModel):
    """Parameters of ``sessions_spawn`` as the model sends them."""

    task: str = Field(description="What the subagent must do; it sees nothing else.")
    label: str | None = Field(None, max_length=80, description="Short name for the thread.")
    agentId: str | None = Field(
        None, description="Agent that owns the run (default: you; others only if allowed)."
    )
    subagent_type: str | None = Field(None, description="Which subagent type runs the task.")
    model: str | None = Field(None, description="Model override.")
    thinking: str | None = Field(None, description="off|minimal|low|medium|high")
    runTimeoutSeconds: int | None = Field(
        None,
        ge=0,
        description="Seconds until the run times out (default: configured); 0: no limit of "
        "its own (the configured maximum, or none if none is set). Never above the maximum.",
    )
    context: Literal["isolated", "fork"] | None = Field(
        None,
        description="isolated: the subagent sees only the task; fork: it also sees this "
        "conversation's recent messages. Default: the type's (usually isolated).",
    )
    cleanup: Literal["keep", "delete"] = "keep"
    maxTokens: int | None = Field(
        None,
        ge=1,
        description="Token limit of the run (prompt + completion); lowered to the configured "
        "limits and to what remains. At the limit the run stops with its partial result.",
    )
    maxCostUsd: float | None = Field(
        None, gt=0, description="USD limit of the run (lowered as maxTokens)."
    )
    join: bool = Field(
        True,
        description="Wait for this run: when all runs you started with join=true have "
        "ended you get their results in one follow-up turn. false: it only reports in "
        "the thread.",
    )
    thread: bool = Field(
        False,
        description="true: the child gets a thread of its own (a forum topic, a new Slack "
        "or Matrix thread) where people talk to it; its answer is also posted here.",
    )

    @field_validator("subagent_type", mode="before")
    @classmethod
    def _default_type(cls, value: object) -> object:
        return "general-purpose" if value in (None, "") else value

    @field_validator("task")
    @classmethod
    def _task(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("task is empty; describe the work for the subagent")
        if len(value) > 20_000:
            raise ValueError(f"task is {len(value):,} characters long; at most 20,000 are allowed")
        return value


TypeList = tuple[tuple[str, str], ...]
"""``(name, description)`` of each subagent type, in order."""


@lru_cache(maxsize=32)
def spawn_args_for(types: TypeList) -> type[SpawnArgs]:
    """:class:`SpawnArgs` whose ``subagent_type`` is one of ``types`` (an ``enum`` in the
    JSON schema the model sees; anything else is an argument error)."""
    names = tuple(name for name, _ in types)
    choice: Any = Literal.__getitem__(names)
    default = "general-purpose" if "general-purpose" in names else names[0]
    field = Field(default, description="Which subagent type runs the task (see the list).")
    return create_model(
        "SpawnArgs", __base__=SpawnArgs, __module__=__name__, subagent_type=(choice, field)
    )


def spawn(ctx: ToolContext, args: SpawnArgs) -> dict[str, object]:
    """Create and enqueue one subagent run; returns the tool's JSON-able answer."""
    parent = _parent(ctx)
    agent_id = args.agentId or ctx.agent_id
    check_agent(ctx.deps.settings, ctx.agent_id, agent_id)  # its allow_agents
    if parent is not None:  # a child reports to its parent, so it always joins
        args = args.model_copy(update={"join": True})
    request = SpawnRequest(
        task=args.task,
        session_key=parent.session_key if parent else ctx.session_key,
        thread=ctx.thread,
        requester=ctx.requester,
        agent_id=agent_id,
        parent_run_id=parent.run_id if parent else "",
        root_run_id=(parent.root_run_id or parent.run_id) if parent else "",
        depth=parent.depth + 1 if parent else 1,
        label=args.label or "",
        subagent_type=args.subagent_type,
        model=args.model,
        thinking=args.thinking,
        timeout_s=args.runTimeoutSeconds,
        cleanup=Cleanup(args.cleanup),
        context=RunContext(args.context) if args.context else None,
        join_id=_join_id(ctx, args),
        max_tokens=args.maxTokens,
        max_cost_usd=args.maxCostUsd,
        own_thread=args.thread and parent is None,  # a nested child reports to its parent
        fork_message=ctx.turn_message,
        spawned_in_turn=len(ctx.spawned),  # the per-turn limit: bot.runs.quota decides
    )
    record = spawn_run(ctx.deps, request, known_models=ctx.known_models)
    ctx.spawned.append(record.run_id)
    answer: dict[str, object] = {
        "status": "accepted",
        "runId": record.run_id,
        "childSessionKey": record.child_session_key,
        "number": record.seq,
        "estimate": tool_answer(Estimate.from_json(record.estimate)),
    }
    if record.approval_id:  # held: its estimate is above budgets.approve_above_usd
        answer["status"] = "waiting_for_approval"
        answer["approval"] = (
            "a person must approve its start in the thread (its cost estimate is above the "
            "limit); if they deny it or nobody answers, it ends stopped without running"
        )
    if record.warnings:
        answer["warnings"] = list(record.warnings)
    answer["join"] = bool(record.join_id)
    if args.join and not record.join_id:
        answer["note"] = (
            "chain limit reached: this run reports in the thread and you get no follow-up turn"
            if ctx.chain_exhausted
            else "this run reports in the thread; you get no follow-up turn for it"
        )
    return answer


def _parent(ctx: ToolContext) -> RunRecord | None:
    """The run spawning (None: the main agent), once it may: an orchestrator below the
    depth limit, not stopping, with rounds and children left."""
    if ctx.run_id is None:
        return None
    deps = ctx.deps
    parent = deps.runs.get(ctx.run_id)
    if parent is None or not may_nest(deps.settings, parent):
        raise SpawnRejected(
            "this subagent cannot spawn subagents (only an orchestrator type below "
            f"FANBOT_SUBAGENTS__MAX_SPAWN_DEPTH={deps.settings.subagents.max_spawn_depth})"
        )
    if parent.status.terminal or deps.runs.stop_requested(parent.run_id):
        raise SpawnRejected("this run is ending; it cannot start subagents")
    if ctx.join is None:
        raise SpawnRejected("this run has used all its rounds of subagents; answer now")
    limit = deps.settings.subagents.max_children_per_run
    children = [
        r for r in deps.runs.session_runs(parent.session_key) if r.parent_run_id == parent.run_id
    ]
    if len(children) >= limit:
        raise SpawnRejected(f"at most {limit} subagents per run; answer with what you have")
    return parent


def _join_id(ctx: ToolContext, args: SpawnArgs) -> str:
    """The fan-in this run joins: this turn's, while it is open and the model wants it."""
    if not args.join or ctx.join is None:
        return ""
    return ctx.join.join_id if open_join(ctx.deps, ctx.join) else ""
