"""The work of a subagent run: its context, its tools and the tool loop.

Fresh context: the type's system prompt plus the task as the only user message. A forked
run (``context: fork``) first sees the requester session's recent history as it stands when
the run starts, plus the spawning turn's own message if the history lacks it yet: its last
:data:`FORK_MAX_MESSAGES` user and assistant messages, at most :data:`FORK_MAX_CHARS`
characters together (newest kept). A follow-up (same child session) continues its
transcript instead.

A type with an ``output_schema`` must answer with matching JSON (:mod:`bot.agent.structured`):
one correction turn when it does not, then the run fails with the raw answer as its result.

The run lifecycle (:mod:`bot.runs.execute`) calls :class:`SubagentBody` with the hooks and
the meter, and maps how it ends; model failures surface as
:class:`~bot.errors.ModelCallFailed`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from bot.agent import structured
from bot.agent.context import ToolContext
from bot.agent.gated import approved_call, decided_step, gate_for
from bot.agent.loop import Gate, run_calls, run_loop
from bot.agent.model_errors import model_error_text
from bot.agent.resume import pending_step, steps_taken
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.skills import skills_block, visible_skills
from bot.agent.subagent_types import subagent_types, tools_for_type
from bot.agent.tools import Tool
from bot.agent.tools.mcp import McpPool
from bot.agent.tools.skills import for_agent
from bot.deps import Deps
from bot.errors import ModelCallFailed, RunFailed, RunParked
from bot.hooks.chain import NO_HOOKS, Hooks, run_hooks
from bot.models.completion import ChatModel
from bot.runs.approval_gate import park_for
from bot.runs.join import continuation_prompt, may_nest, plan_run_join
from bot.runs.render import ANNOUNCE_SKIP
from bot.runs.send import continuation
from bot.runs.type_registry import system_prompt
from bot.steps import LoopControl, LoopResult, Meter
from bot.text.clip import clip
from bot.text.untrusted import RULE as UNTRUSTED_RULE
from bot.types import RunContext, RunRecord

log = logging.getLogger(__name__)

FORK_MAX_MESSAGES = 20
FORK_MAX_CHARS = 24_000
Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class SubagentBody:
    """A :class:`~bot.steps.RunBody` that runs the agent's tool loop.

    Attributes:
        deps: Stores and settings.
        model: The model client.
        mcp: The worker's MCP connections (none: no MCP tools).
        resume_join: Set when a parked orchestrator resumes: the fan-in of its children
            whose results it goes on with.
        resume_approval: Set when a run parked for a tool call's approval resumes: the
            decided approval (the call runs or gets its denial, then the loop goes on).
        recovered: The run's worker was lost: this attempt goes on from its transcript's
            last completed step (:mod:`bot.agent.resume`).
    """

    deps: Deps
    model: ChatModel
    mcp: McpPool | None = None
    resume_join: str = ""
    resume_approval: str = ""
    recovered: bool = False

    def __call__(self, record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        deps = self.deps
        sub_type = subagent_types(deps.settings)[record.subagent_type]
        skills = tuple(
            visible_skills(deps.settings, agent_id=record.agent_id, type_name=sub_type.name)
        )
        prompt = system_prompt(deps.settings, record.subagent_type)
        system = "\n\n".join(p for p in (prompt, skills_block(skills), UNTRUSTED_RULE) if p)
        if sub_type.output_schema is not None:
            system += structured.instructions(sub_type.output_schema)
        hooks = run_hooks(deps.settings, record, report=meter.remarks.append)
        if self.resume_join:
            messages = resumed_messages(deps, record, self.resume_join, hooks=hooks)
        elif self.resume_approval:
            messages = deps.transcripts.context(record.session_id)
        elif self.recovered and has_task(
            messages := deps.transcripts.context(record.session_id), record
        ):
            pass  # the lost attempt's context, as recorded
        else:
            messages = start_messages(deps, record, system=system)
        ctx = ToolContext(
            deps=deps,
            session_key=record.child_session_key,
            thread=record.thread,
            requester=record.requester,
            agent_id=record.agent_id,
            workspace_key=record.session_key,
            model=self.model,
            run_id=record.run_id,
            join=plan_run_join(deps.settings, record, record.rounds),
            skills=skills,
            hooks=hooks,
        )
        tools = for_agent(tools_for_type(sub_type, deps.settings, mcp=self.mcp), skills)
        if may_nest(deps.settings, record):
            tools += [t.configured(deps.settings) for t in SESSION_TOOLS_LIST if t.name in NEST]
        max_steps = deps.settings.openai.max_steps

        gate = gate_for(
            deps.settings,
            sub_type,
            lambda pending: park_for(deps, record, pending, text=meter.last_text),
        )

        def loop(steps: int) -> LoopResult:
            return run_loop(
                model=self.model,
                model_name=record.model,
                messages=messages,
                tools=tools,
                ctx=ctx,
                max_steps=steps,
                meter=meter,
                control=control,
                thinking=record.thinking,
                max_tool_chars=deps.settings.subagents.max_result_chars,
                gate=gate,
            )

        def next_round(rounds: int) -> LoopResult:
            nonlocal ctx
            ctx = dataclasses.replace(
                ctx, join=plan_run_join(deps.settings, record, rounds), spawned=[]
            )
            return loop(max(1, max_steps - meter.steps))

        try:
            answered = None
            if self.resume_approval:
                decided_step(
                    deps, self.resume_approval, gate=gate, tools=tools, ctx=ctx,
                    messages=messages, meter=meter, control=control,
                )  # fmt: skip
            elif self.recovered:
                ctx = dataclasses.replace(ctx, spawned=_joined_so_far(deps, ctx))
                answered = _lost_step(
                    deps, record, gate=gate, tools=tools, ctx=ctx,
                    messages=messages, meter=meter, control=control,
                )  # fmt: skip
            result = answered or loop(max(1, max_steps - meter.steps))
            if ctx.join is not None:
                result = _children(deps, record, ctx, result, messages, control, next_round)
            if sub_type.output_schema is None:
                return result
            return _structured(
                sub_type.output_schema,
                result,
                lambda: loop(max(1, max_steps - meter.steps)),  # the one correction turn
                messages,
                control,
            )
        except openai.APIError as exc:
            base_url = self.model.base_url
            text = model_error_text(exc, base_url=base_url, model=record.model, detail=True)
            timed_out = isinstance(exc, openai.APITimeoutError)
            raise ModelCallFailed(text, timed_out=timed_out) from exc


def has_task(messages: Sequence[Mapping[str, Any]], record: RunRecord) -> bool:
    """Whether a recorded context holds the run's task yet (a worker lost before the run's
    first write left none, or only a follow-up's earlier transcript)."""
    return any(
        m.get("role") == "user" and record.task in str(m.get("content") or "") for m in messages
    )


def _joined_so_far(deps: Deps, ctx: ToolContext) -> list[str]:
    """The children a lost attempt spawned into this round's still open fan-in: the new
    attempt waits for them as the lost one would have."""
    if ctx.join is None:
        return []
    join = deps.joins.get(ctx.join.join_id)
    return list(join.run_ids) if join is not None and join.state == "open" else []


def _lost_step(
    deps: Deps,
    record: RunRecord,
    *,
    gate: Gate,
    tools: Sequence[Tool],
    ctx: ToolContext,
    messages: list[Message],
    meter: Meter,
    control: LoopControl,
) -> LoopResult | None:
    """Finish the step a lost attempt was in (:func:`bot.agent.resume.pending_step`): the
    call in flight gets its "interrupted" result (or runs again when safe to repeat), the
    calls after it run. Returns the lost attempt's answer when it had answered already."""
    meter.steps = steps_taken(messages)
    safe = {t.name for t in tools if t.repeat_safe}
    pending = pending_step(messages, repeat_safe=safe.__contains__)
    if pending.answer_seen:
        return LoopResult(text=pending.answered, complete=True)
    for note in pending.interrupted:
        messages.append(note)
        control.record(note)
    if pending.names or pending.repeated:
        what = pending.repeated and f"{pending.repeated} runs again"
        what = what or f"{', '.join(pending.names)} reported as interrupted"
        log.warning("run %s goes on after a lost worker: %s", record.run_id, what)
    if pending.repeated:  # counted when it started; it counts once, however often it runs
        meter.tool_calls = max(0, meter.tool_calls - 1)
    limit = deps.settings.subagents.max_result_chars
    calls = list(pending.calls)
    approved = approved_call(deps, record.approval_id, calls[0]) if pending.repeated else None
    if approved is not None:  # a person approved it: it runs again, not asked again
        run_calls([approved], tools=tools, ctx=ctx, messages=messages, meter=meter,
                  control=control, max_tool_chars=limit)  # fmt: skip
        calls = calls[1:]
    run_calls(calls, tools=tools, ctx=ctx, messages=messages, meter=meter,
              control=control, max_tool_chars=limit, gate=gate)  # fmt: skip
    return None


NEST = frozenset({"sessions_spawn"})
"""The session tools an orchestrator run gets (below the depth limit)."""


def _children(
    deps: Deps,
    record: RunRecord,
    ctx: ToolContext,
    result: LoopResult,
    messages: list[Message],
    control: LoopControl,
    next_round: Callable[[int], LoopResult],
) -> LoopResult:
    """An orchestrator answered: while children it spawned this round still run, park
    (:class:`~bot.errors.RunParked`: its fan-in resumes it); if they all ended already, go
    on here with their results."""
    rounds = record.rounds
    while ctx.join is not None and ctx.spawned:
        join = deps.joins.get(ctx.join.join_id)
        if join is None or not join.run_ids:
            break  # it spawned with join=false only
        if not deps.joins.seal(join.join_id):
            raise RunParked(result.text, rounds=rounds + 1)
        deps.joins.start(join.join_id)  # every child ended already: no need to park
        rounds += 1
        deps.runs.update(record.run_id, rounds=rounds)  # a lost worker's next attempt reads it
        text = continuation_prompt(deps, join, [], hooks=ctx.hooks)
        prompt = {"role": "user", "content": text}
        messages.append(prompt)
        control.record(prompt)
        result = next_round(rounds)
    return result


def resumed_messages(
    deps: Deps, record: RunRecord, join_id: str, *, hooks: Hooks = NO_HOOKS
) -> list[Message]:
    """A parked orchestrator's context when its fan-in resumes it: its transcript, then its
    children's statuses and results (as its ``hooks`` leave them)."""
    join = deps.joins.get(join_id)
    prompt = "(no results)"
    if join is not None:
        prompt = continuation_prompt(deps, join, [], hooks=hooks)
    messages = continuation(deps.transcripts.read(record.session_id), prompt)
    deps.transcripts.append(record.session_id, messages[-1])
    return messages


def start_messages(deps: Deps, record: RunRecord, *, system: str | None) -> list[Message]:
    """The run's starting messages, written to its transcript as they are new: ``system``
    (if any), the forked history (``context: fork``), the task; a follow-up continues its
    child session's transcript instead."""
    transcripts = deps.transcripts
    messages = [{"role": "system", "content": system}] if system else []
    task = record.task
    if record.context is RunContext.FORK:
        forked = fork_messages(with_turn(deps.history.load(record.session_key), record))
        messages += forked
        if forked:
            task = FORK_TASK.format(task=task)
    messages.append({"role": "user", "content": task})
    prior = transcripts.begin(record.session_id, messages)  # one round trip either way
    if prior:  # a follow-up: the child session goes on
        messages = continuation(prior, record.task)
        transcripts.append(record.session_id, messages[-1])
    return messages


FORK_TASK = (
    "The messages above are the conversation you were started from, for context only "
    "(you cannot reply to it). Your task:\n{task}"
)


def with_turn(history: list[Message], record: RunRecord) -> list[Message]:
    """``history`` plus the spawning turn's own message, unless the history has it already
    (the turn ended before the run started)."""
    turn = record.fork_message
    if not turn or any(m.get("role") == "user" and m.get("content") == turn for m in history):
        return history
    return [*history, {"role": "user", "content": turn}]


def fork_messages(
    history: Sequence[Mapping[str, Any]],
    *,
    max_messages: int = FORK_MAX_MESSAGES,
    max_chars: int = FORK_MAX_CHARS,
) -> list[Message]:
    """The newest user and assistant messages of ``history`` (pure): at most
    ``max_messages`` of them and ``max_chars`` characters together; the newest one is
    clipped to fit rather than dropped."""
    kept: list[Message] = []
    budget = max_chars
    for message in reversed(history):
        content = message.get("content")
        if message.get("role") not in ("user", "assistant") or not isinstance(content, str):
            continue
        if not content.strip():
            continue
        if len(kept) >= max_messages or budget <= 0 or (kept and len(content) > budget):
            break
        content = clip(content, budget) if len(content) > budget else content
        kept.append({"role": message["role"], "content": content})
        budget -= len(content)
    return kept[::-1]


def _structured(
    schema: Mapping[str, Any],
    result: LoopResult,
    again: Callable[[], LoopResult],
    messages: list[Message],
    control: LoopControl,
) -> LoopResult:
    """``result`` checked against ``schema``: normalized JSON, after at most one correction
    turn (``again``); :class:`RunFailed` with the raw answer when it still does not match."""
    if result.complete and result.text.strip() == ANNOUNCE_SKIP:
        return result
    checked = structured.check(schema, result.text)
    if not checked.ok and result.complete:
        note = {"role": "user", "content": structured.correction(str(checked.problem))}
        messages.append(note)
        control.record(note)
        result = again()
        checked = structured.check(schema, result.text)
    if not result.complete:
        raise RunFailed("step limit reached before a structured answer", result=result.text)
    if not checked.ok:
        raise RunFailed(
            f"the answer does not match the type's output_schema after one correction: "
            f"{checked.problem}",
            result=result.text,
        )
    return LoopResult(text=structured.normalized(checked.value), complete=True)
