"""Spawning a run: validate what was asked, write the run record, enqueue its job.

Model resolves as: the request -> the type's ``model`` -> the agent's ``subagent_model`` ->
the agent's own ``model`` -> ``subagents.model`` -> ``openai.model``; thinking as: the
request -> the type's -> the agent's ``subagent_thinking`` -> ``subagents.thinking``. An
unknown model warns and falls back; a bad thinking value or an unknown type is an error
(:class:`~bot.errors.SpawnRejected`). The timeout is the request's (``0``: no soft deadline
of its own, i.e. ``subagents.max_run_timeout_seconds``; with that maximum 0, no deadline at
all) else ``subagents.run_timeout_seconds``, never above a non-zero maximum. The context is the request's, else the type's. Whoever spawns (the
main agent's ``sessions_spawn`` tool, later a chat command) builds a
:class:`SpawnRequest`; the lifecycle does the rest. Each run carries the estimate of recent
runs of its type and model (:mod:`bot.runs.estimate`); one whose p90 cost is above
``budgets.approve_above_usd`` waits for a person instead of its line
(:mod:`bot.runs.spawn_approval`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bot.config import THINKING_LEVELS, Settings
from bot.deps import Deps
from bot.errors import SpawnRejected
from bot.models.catalog import (
    DEFAULT_ENDPOINT,
    Target,
    configured_models,
    endpoints,
    qualified,
    resolve,
)
from bot.observe import record as observed
from bot.observe import tracing
from bot.runs.approval_gate import post_request
from bot.runs.budget import SpawnBudget, spawn_limits
from bot.runs.estimate import estimate
from bot.runs.line import enqueue_run
from bot.runs.quota import SpawnQuota, admit_spawn
from bot.runs.spawn_approval import hold, needs_approval, show_held
from bot.runs.thread_children import request_thread
from bot.runs.type_registry import subagent_types
from bot.sessions import new_child_session_key
from bot.text.clip import clip
from bot.types import Cleanup, ResultFormat, RunContext, RunRecord, ThreadRef

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
        timeout_s: Run timeout; None = the configured default, 0 = the configured maximum
            (none at all when that is 0).
        context: ``isolated`` or ``fork``; None = the type's.
        cleanup: Whether the child session is archived at once when it ends.
        join_id: The fan-in it joins, if any (see :mod:`bot.runs.join`).
        parent_run_id: The spawning run, for a child ("" when the main agent spawns).
        root_run_id: Its tree's root ("" = itself).
        depth: 1 for the main agent's runs, the parent's + 1 for a child.
        max_tokens: Requested token limit of the run (see :mod:`bot.runs.budget`).
        max_cost_usd: Requested USD limit of the run.
        notes: Warnings its announce carries from the start (a schedule that fired late).
        own_thread: Give it a thread of its own (:mod:`bot.runs.thread_children`).
        fork_message: The spawning turn's own message, for a ``fork`` context.
        run_id: A fixed id (a schedule's tick, so a retried firing is the same run);
            "" = a new one.
        spawned_in_turn: Spawns the asking turn made before (the per-turn limit); None: a
            person's ``/subagents spawn`` (see :mod:`bot.runs.quota`).
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
    join_id: str = ""
    context: RunContext | None = None
    parent_run_id: str = ""
    root_run_id: str = ""
    depth: int = 1
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    notes: tuple[str, ...] = ()
    own_thread: bool = False
    run_id: str = ""
    fork_message: str = ""
    spawned_in_turn: int | None = 0


@tracing.traced("spawn")
def spawn_run(deps: Deps, request: SpawnRequest, *, known_models: KnownModels) -> RunRecord:
    """Validate ``request``, record the run and enqueue it; returns the queued record."""
    s = deps.settings
    types = subagent_types(s)
    type_name = request.subagent_type or "general-purpose"
    if type_name not in types:
        raise SpawnRejected(f"unknown subagent_type {type_name!r}; available: {', '.join(types)}")
    sub_type = types[type_name]
    thinking = resolve_thinking(s, request.agent_id, request.thinking or sub_type.thinking)
    model, warnings = resolve_model(
        s, request.agent_id, request.model or sub_type.model, known_models
    )
    timeout_s, timeout_warnings = resolve_timeout(s, request.timeout_s)
    limits = spawn_limits(deps, sub_type, _budget_ask(request))
    request = dataclasses.replace(request, run_id=request.run_id or uuid.uuid4().hex)
    quota = SpawnQuota(
        requester=request.requester,
        session_key=request.session_key,
        run_id=request.run_id,
        spawned_in_turn=request.spawned_in_turn,
    )
    admit_spawn(deps, quota)  # the one check of spawns per turn and runs per person/thread
    record = _new_record(deps, request, type_name, model, thinking, warnings + timeout_warnings)
    context = request.context or RunContext(sub_type.context)
    record = dataclasses.replace(
        record,
        timeout_s=timeout_s,
        context=context,
        fork_message=clip(request.fork_message, s.history.max_message_chars)  # as history cuts it
        if context is RunContext.FORK
        else "",
        result_format=ResultFormat.JSON if sub_type.output_schema else ResultFormat.TEXT,
        max_tokens=limits.tokens,
        max_cost_usd=limits.usd,
    )
    record = _estimated(deps, record)
    if not deps.runs.create(record) and record.join_id:
        record = dataclasses.replace(record, join_id="")  # the join had closed meanwhile
    if request.own_thread:
        request_thread(deps, record)
    _start_or_ask(deps, record)
    observed.run_spawned(deps, record)
    return record


def _estimated(deps: Deps, record: RunRecord) -> RunRecord:
    """``record`` with its estimate from recent runs of its type and model, held for a
    person's approval when that is above ``budgets.approve_above_usd``
    (:mod:`bot.runs.spawn_approval`)."""
    est = estimate(deps.estimates.samples(record.subagent_type, record.model))
    record = dataclasses.replace(record, estimate=est.to_json())
    return hold(deps, record, est) if needs_approval(deps.settings, est) else record


def _start_or_ask(deps: Deps, record: RunRecord) -> None:
    """Put the run in line; a held one asks for its approval instead."""
    if not record.approval_id:
        enqueue_run(deps, record)
        return
    show_held(deps, record)
    post_request(deps, record.approval_id)


def _budget_ask(request: SpawnRequest) -> SpawnBudget:
    return SpawnBudget(
        session_key=request.session_key,
        requester=request.requester,
        parent_run_id=request.parent_run_id,
        root_run_id=request.root_run_id,
        tokens=request.max_tokens,
        usd=request.max_cost_usd,
    )


def resolve_model(
    settings: Settings, agent_id: str, requested: str | None, known_models: KnownModels
) -> tuple[str, list[str]]:
    """Pick the run's model, as fanbot names it (:attr:`bot.models.catalog.Target.name`:
    ``endpoint/model``, bare on the default endpoint); an unknown requested model falls
    back with a warning naming what its endpoint knows."""
    s = settings
    agent = s.agent(agent_id)
    default = qualified(
        s, agent.subagent_model or agent.model or s.subagents.model or s.openai.model
    )
    if not requested:
        return default, []
    target = resolve(s, requested)
    named = {s.subagents.model, agent.subagent_model, agent.model}
    named |= {t.model for t in s.subagent_types}
    configured = configured_models(s) | {qualified(s, m) for m in named if m}
    if target.name in configured:
        return target.name, []
    on_default = target.endpoint == DEFAULT_ENDPOINT
    listed = None if on_default and s.openai.models else known_models()
    if listed is None and not (on_default and s.openai.models):
        return target.name, []  # nothing to check against: trust the request
    if target.name in (listed or frozenset()):
        return target.name, []
    known = configured | (listed or frozenset())
    return default, [
        f"unknown model {requested!r}{_known_hint(s, target, known)}; using {default!r}"
    ]


MAX_NAMED = 8
"""An unknown model's warning names at most this many of its endpoint's models."""


def _known_hint(settings: Settings, target: Target, known: frozenset[str] | set[str]) -> str:
    """What the warning about an unknown ``target`` adds: the models its named endpoint
    knows, or the endpoints there are when its first part reads as an unknown one."""
    if target.endpoint != DEFAULT_ENDPOINT:
        prefix = f"{target.endpoint}/"
        on_it = sorted(m for m in known if m.startswith(prefix))
        shown = ", ".join(on_it[:MAX_NAMED]) + (", …" if len(on_it) > MAX_NAMED else "")
        return f" ({target.endpoint} knows {shown or 'no models'})"
    first, slash, _ = target.model.partition("/")
    if slash and settings.models.endpoints:
        names = ", ".join(endpoints(settings))
        return f" (no endpoint {first!r}; endpoints: {names})"
    return ""


def resolve_timeout(settings: Settings, requested: int | None) -> tuple[int, list[str]]:
    """The run's timeout in seconds: ``requested`` (0: the maximum) else the default, at
    most ``subagents.max_run_timeout_seconds`` (a warning says when a request was cut). A
    maximum of 0 is no upper bound: 0 is then no deadline at all, and nothing is cut."""
    sub = settings.subagents
    maximum = sub.max_run_timeout_seconds
    if requested == 0:
        return maximum, []
    wanted = requested or sub.run_timeout_seconds
    if maximum == 0 or wanted <= maximum:
        return wanted, []
    warning = f"runTimeoutSeconds {wanted} is above the maximum; using {maximum}"
    return maximum, [warning] if requested else []


def allowed_agents(settings: Settings, requester: str) -> list[str]:
    """The agents ``requester`` may target with ``agentId``: itself, then its
    ``allow_agents`` (``*``: every agent in ``FANBOT_AGENTS``) that exist."""
    known = sorted({settings.agent_id, *settings.agents} - {requester})
    rule = settings.agent(requester).allow_agents
    others = known if "*" in rule else [a for a in known if a in rule]
    return [requester, *others]


def check_agent(settings: Settings, requester: str, target: str) -> None:
    """Refuse a ``target`` agent that is unknown or not in ``requester``'s allowlist."""
    if target == requester:
        return
    if target != settings.agent_id and target not in settings.agents:
        known = ", ".join(sorted({settings.agent_id, requester, *settings.agents}))
        raise SpawnRejected(f"unknown agentId {target!r}; known: {known}")
    allowed = allowed_agents(settings, requester)
    if target not in allowed:
        raise SpawnRejected(
            f"agentId {target!r} is not allowed for agent {requester!r}; "
            f"allowed: {', '.join(allowed)}"
        )


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
    run_id = request.run_id or uuid.uuid4().hex
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
        warnings=(*request.notes, *warnings),
        join_id=request.join_id,
        parent_run_id=request.parent_run_id,
        root_run_id=request.root_run_id or run_id,
        depth=request.depth,
        traceparent=tracing.traceparent(),
    )
