"""One main-agent turn: history + the new message -> tool loop -> reply in the outbox.

The job wire contract is :class:`bot.store.jobs.TurnJob` (JSON). The reply and the history
update are written in one transaction, so a turn is either fully visible or not at all.

Its tool calls pass the one approval gate (:mod:`bot.agent.gated`): a call that needs a
person parks the turn (its steps stay recorded, its job ends and frees its worker and its
session's lane) and the request goes to the thread; the decision queues the turn's resume
job (``approval_id`` set), which finishes the step and goes on to the answer
(docs/architecture.md, "Approvals: one gate").
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
from rq.timeouts import BaseTimeoutException, JobTimeoutException

from bot.agent import policy
from bot.agent.compaction import Compacted
from bot.agent.context import ToolContext
from bot.agent.gated import approved_call, decided_step, gate_for
from bot.agent.loop import Gate, LoopControl, Meter, run_calls, run_loop
from bot.agent.model_errors import model_error_text
from bot.agent.resume import PendingStep, pending_step, steps_taken
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.skills import Skill, skills_block, visible_skills
from bot.agent.subagent_types import available_tools
from bot.agent.tools import Tool
from bot.agent.tools.mcp import McpPool
from bot.agent.tools.skills import for_agent
from bot.config import Settings
from bot.deps import Deps
from bot.errors import BudgetExceeded, HookFailed, RunInterrupted, RunParked
from bot.hooks.chain import Hooks, Who, hooks_for
from bot.models.catalog import main_model
from bot.models.completion import ChatModel
from bot.models.window import with_summary
from bot.observe import tracing
from bot.runs.approval_gate import RESUME_PREFIX, park_turn, post_request
from bot.runs.budget import over_daily, turn_guard
from bot.runs.join import JoinPlan, chain_exhausted, continuation_prompt, plan_join, seal_join
from bot.runs.naming import Icon
from bot.sessions import qualified_user
from bot.store.approvals import ApprovalState
from bot.store.jobs import TurnJob
from bot.supervise import abort
from bot.text.clip import clip_markdown
from bot.text.untrusted import RULE as UNTRUSTED_RULE
from bot.types import Outbound, OutboundKind, ThreadRef

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are fanbot, a helpful assistant in a team chat thread. Answer directly when you "
    "can. For bigger or parallelizable work, call sessions_spawn once per independent task "
    "(several calls in one response run in parallel). After spawning, reply in one short "
    "line and stop: do not wait. {fan_in} Results of subagents appear in the conversation "
    "as notes. Keep answers concise and use Markdown."
)
FAN_IN_ON = (
    "When every run you started with join=true has ended, you get one follow-up turn with "
    "their results: then reconcile them into one answer (or spawn the next step)."
)
FAN_IN_OFF = "Each subagent announces its result in this thread by itself; do not repeat it."
STOPPED_IN_MODEL_CALL = f"{Icon.STOPPED} Stopped while waiting for the model."
TOOK_TOO_LONG = f"{Icon.TIMED_OUT} That took too long, so I stopped."


def turn_lost_line(deaths: int) -> str:
    """The answer of a turn not run again after its worker died ``deaths`` times (pure)."""
    return (
        f"{Icon.WARNING} I lost this answer: the worker died {deaths} "
        f"time{'s' if deaths != 1 else ''}. Please send it again."
    )


def main_agent_tools(
    settings: Settings, agent_id: str, *, mcp: McpPool | None = None
) -> list[Tool]:
    """The main agent's tools: session tools plus every available one, by policy (MCP
    servers' through ``mcp``)."""
    pool = [*SESSION_TOOLS_LIST, *available_tools(settings, mcp=mcp)]
    return policy.main_agent_tools(settings, agent_id, pool)


def system_prompt(settings: Settings, agent_id: str, *, skills: Sequence[Skill] = ()) -> str:
    """The agent's configured prompt, else the default one for the fan-in mode; then the
    skills it sees (docs/skills.md); last the untrusted-content rule."""
    configured = settings.agent(agent_id).system_prompt
    fan_in = FAN_IN_OFF if settings.subagents.announce == "cards" else FAN_IN_ON
    prompt = configured or DEFAULT_SYSTEM_PROMPT.format(fan_in=fan_in)
    return "\n\n".join(p for p in (prompt, skills_block(skills), UNTRUSTED_RULE) if p)


def execute_turn(
    deps: Deps, model: ChatModel, job: TurnJob, *, mcp: McpPool | None = None, job_id: str = ""
) -> str:
    """Run the turn and queue its reply; returns the reply text ("" for a continuation
    that was cancelled or already ran, or a job that is no longer the turn's attempt).
    ``mcp``: the worker's MCP connections (none: no MCP tools). ``job_id``: the RQ job
    executing it (its lease and in-flight entry name it; docs/architecture.md, "Resume
    after a crash").

    A later attempt (``job.attempt`` > 1: an earlier one lost its worker) goes on from what
    the earlier ones recorded: their user message and steps, the tool call that was in
    flight answered as interrupted unless its tool is safe to repeat."""
    thread = ThreadRef.from_json(job.thread)
    job_id = job_id or f"local-{job.message_id}"
    if job.attempt == 1 and not job.approval_id:  # an old /stop never stops its next attempt
        deps.stops.clear_turn_stop(job.session_key)
    recorded = deps.turn_attempts.begin(
        job.reply_key,
        job_id=job_id,
        attempt=job.attempt,
        payload=job.model_dump(mode="json"),
        lease_seconds=deps.settings.subagents.stale_after_seconds,
        resumes=bool(job.approval_id),
    )
    if recorded is None:
        log.info("turn %s: job %s is not its attempt any more", job.reply_key, job_id)
        return ""
    with turn_lease(deps, job.reply_key, job_id):
        return _execute(deps, model, job, thread, recorded, mcp, job_id=job_id)


def _execute(
    deps: Deps,
    model: ChatModel,
    job: TurnJob,
    thread: ThreadRef,
    recorded: list[dict[str, Any]],
    mcp: McpPool | None,
    *,
    job_id: str,
) -> str:
    history = deps.history.load(job.session_key)
    hooks = turn_hooks(deps.settings, job)
    user_message = recorded[0] if recorded else None
    if user_message is None:
        try:
            user_message = _user_message(deps, job, history, hooks)
        except HookFailed as exc:  # a fan-in hook: said in the thread, never tried again
            _close(deps, job, f"{Icon.WARNING} {exc}")
            return ""
        if user_message is None:
            deps.turn_attempts.finish(job.reply_key)
            return ""
        deps.turn_attempts.record(job.reply_key, [user_message], first=True)
    steps = recorded[1:]
    summary = deps.summaries.get(job.session_key)  # older turns compacted (docs/models.md)
    skills = tuple(visible_skills(deps.settings, agent_id=job.agent_id, type_name=None))
    system = system_prompt(deps.settings, job.agent_id, skills=skills)
    messages: list[dict[str, Any]] = with_summary(
        [
            {"role": "system", "content": system},
            *history,
            user_message,
            *steps,
        ],
        summary.text if summary is not None else "",
    )
    plan = plan_join(deps.settings, job)
    ctx = ToolContext(
        deps=deps,
        session_key=job.session_key,
        thread=thread,
        requester=qualified_user(job.platform, job.sender_id),
        agent_id=job.agent_id,
        model=model,
        join=plan,
        chain_exhausted=chain_exhausted(deps.settings, job),
        turn_message=str(user_message.get("content") or "") if job.kind == "message" else "",
        spawned=spawned_in(steps),
        skills=skills,
        hooks=hooks,
    )
    try:
        answer = _answer(deps, model, job, messages, ctx, mcp, steps=steps, job_id=job_id)
    except RunParked as parked:
        _park(deps, job, job_id, parked.approval_id)
        return ""  # not sealed: the resumed turn may still spawn into its fan-in
    except BaseException:
        _seal(deps, plan)
        raise
    try:
        _commit(deps, job, thread, user_message, answer.text, failed=answer.failed)
    finally:
        _seal(deps, plan)
    return answer.text


def _park(deps: Deps, job: TurnJob, job_id: str, approval_id: str) -> None:
    """The turn waits for a person: mark it parked (its job ends now, freeing the worker and
    the session's lane) and post the request. A job that is no longer the turn's attempt
    withdraws the approval it just made, unasked."""
    keep = deps.settings.approvals.timeout_seconds + deps.turn_attempts.ttl_seconds
    if not deps.turn_attempts.park(
        job.reply_key, job_id=job_id, approval_id=approval_id, keep_seconds=keep
    ):
        deps.approvals.decide(approval_id, state=ApprovalState.EXPIRED, by="", arguments="")
        log.info("turn %s: job %s is not its attempt any more", job.reply_key, job_id)
        return
    post_request(deps, approval_id)
    log.info("turn %s parked on approval %s", job.reply_key, approval_id)


SPAWNED = frozenset({"accepted", "waiting_for_approval"})
"""The ``sessions_spawn`` answers that made a run (one held for its cost counts too)."""


def spawned_in(steps: list[dict[str, Any]]) -> list[str]:
    """The runs the recorded steps of this turn spawned (pure): an attempt that goes on
    (after an approval or a lost worker) counts them against ``max_spawns_per_turn``."""
    spawn_calls = {
        str(c.get("id"))
        for m in steps
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
        if isinstance(c, dict) and (c.get("function") or {}).get("name") == "sessions_spawn"
    }
    found = []
    for m in steps:
        if m.get("role") != "tool" or str(m.get("tool_call_id")) not in spawn_calls:
            continue
        try:
            answer = json.loads(str(m.get("content") or ""))
        except ValueError:
            continue
        if isinstance(answer, dict) and answer.get("status") in SPAWNED:
            found.append(str(answer.get("runId") or ""))
    return found


@contextmanager
def turn_lease(deps: Deps, reply_key: str, job_id: str) -> Iterator[None]:
    """Refresh the turn's lease every ``heartbeat_seconds`` while the body runs (one small
    daemon thread; a lapsed lease tells the reaper this turn's worker is gone)."""
    sub = deps.settings.subagents
    done = threading.Event()

    def beat() -> None:
        while not done.wait(sub.heartbeat_seconds):
            try:
                deps.turn_attempts.beat(reply_key, job_id, lease_seconds=sub.stale_after_seconds)
            except Exception:  # Redis away: the next beat tries again
                log.debug("turn lease of %s not refreshed", reply_key, exc_info=True)

    thread = threading.Thread(target=beat, name=f"lease-{job_id[:16]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=sub.heartbeat_seconds + 1)


def turn_hooks(settings: Settings, job: TurnJob) -> Hooks:
    """The agent's hooks, for this turn (docs/hooks.md)."""
    who = Who(
        session_key=job.session_key,
        agent_id=job.agent_id,
        requester=qualified_user(job.platform, job.sender_id),
    )
    return hooks_for(settings, who)


def _user_message(
    deps: Deps, job: TurnJob, history: list[dict[str, Any]], hooks: Hooks
) -> dict[str, Any] | None:
    """The turn's new message: the person's, or a continuation's fan-in prompt (None when
    the continuation was cancelled by ``/stop`` or another worker already runs it). A later
    attempt whose earlier one died before recording it does not start the join again (it
    started already: a second start says no)."""
    if job.kind == "message":
        speaker = job.sender_name or job.sender_id
        return {"role": "user", "content": f"{speaker}: {job.text}"}
    join = deps.joins.get(job.join_id)
    if join is None or (job.attempt == 1 and not deps.joins.start(job.join_id)):
        log.info("continuation %s not started: cancelled or already running", job.join_id)
        return None
    return {"role": "user", "content": continuation_prompt(deps, join, history, hooks=hooks)}


def _seal(deps: Deps, plan: JoinPlan | None) -> None:
    """No more spawns join this turn's fan-in; it fires now if they all ended already."""
    if plan is not None:
        seal_join(deps, plan.join_id)


def turn_stopped(deps: Deps, job: TurnJob) -> None:
    """The turn was hard-stopped (``/stop`` while it waited for the model): say so in the
    thread, in place of the answer it would have given (same idempotency key)."""
    _close(deps, job, STOPPED_IN_MODEL_CALL, failed=False)


def turn_timed_out(deps: Deps, job: TurnJob) -> None:
    """The turn reached its hard time limit and did not end (threads pool, fenced): say so
    in the thread, in place of the answer it would have given (same idempotency key)."""
    _close(deps, job, TOOK_TOO_LONG)


def turn_lost(deps: Deps, job: TurnJob, *, deaths: int) -> None:
    """The turn's worker died ``deaths`` times, too often to run it again: say so in the
    thread, in place of the answer (same idempotency key, so an answer that did go out is
    not followed by this)."""
    _close(deps, job, turn_lost_line(deaths))


def _close(deps: Deps, job: TurnJob, text: str, *, failed: bool = True) -> None:
    """Post ``text`` as the answer of a turn that could not post its own (``failed``
    unless a person stopped it), and seal its fan-in."""
    _commit(deps, job, ThreadRef.from_json(job.thread), None, text, failed=failed)
    plan = plan_join(deps.settings, job)
    if plan is not None:
        seal_join(deps, plan.join_id)


def _answer(
    deps: Deps,
    model: ChatModel,
    job: TurnJob,
    messages: list[dict[str, Any]],
    ctx: ToolContext,
    mcp: McpPool | None,
    *,
    steps: list[dict[str, Any]],
    job_id: str,
) -> Answer:
    meter = Meter()

    def checkpoint() -> None:
        if abort.aborted() or deps.stops.turn_stop_requested(job.session_key):
            raise RunInterrupted("turn stopped")

    over = over_daily(deps, session_key=job.session_key, user=ctx.requester)
    if over:  # said without calling the model
        return Answer(over, failed=True)
    guard = turn_guard(deps, session_key=job.session_key, user=ctx.requester, checkpoint=checkpoint)
    # The thread's own model (/model) first, then its agent's (docs/chat-commands.md).
    model_name = main_model(deps.settings, job.agent_id, deps.thread_models.get(job.session_key))
    tools = for_agent(main_agent_tools(deps.settings, job.agent_id, mcp=mcp), ctx.skills)
    control = LoopControl(
        checkpoint=checkpoint,
        budget=guard,
        record=lambda message: deps.turn_attempts.record(job.reply_key, [message]),
    )
    max_tool_chars = deps.settings.subagents.max_result_chars
    gate = gate_for(
        deps.settings,
        None,
        lambda calls: park_turn(
            deps,
            reply_key=job.reply_key,
            thread=ctx.thread,
            requester=ctx.requester,
            calls=calls,
            text=meter.last_text,
        ),
    )
    try:
        if job.approval_id and job_id == RESUME_PREFIX + job.approval_id:
            decided_step(deps, job.approval_id, gate=gate, tools=tools, ctx=ctx,
                         messages=messages, meter=meter, control=control)  # fmt: skip
        else:
            pending = _pending(tools, steps)
            if pending.answer_seen:  # it had answered; only its commit was lost
                return Answer(pending.answered.strip() or "(no answer)")
            _finish_step(
                deps, job, pending, tools, ctx, messages, meter, control, max_tool_chars, gate
            )
        result = run_loop(
            model=model,
            model_name=model_name,
            messages=messages,
            tools=tools,
            ctx=ctx,
            max_steps=max(1, deps.settings.openai.max_steps - steps_taken(steps)),
            meter=meter,
            control=control,
            max_tool_chars=max_tool_chars,
            gate=gate,
            on_compact=lambda c: _keep_summary(deps, job, c),
        )
    except BudgetExceeded as exc:
        return Answer(_with_spawns(str(exc), ctx), failed=True)
    except RunInterrupted:
        return Answer(_with_spawns("Stopped.", ctx))
    except HookFailed as exc:  # the turn answers it, never tried again (docs/hooks.md)
        log.warning("turn in %s: %s", job.session_key, exc)
        return Answer(_with_spawns(f"{Icon.WARNING} {exc}", ctx), failed=True)
    except abort.Aborted:  # threads pool: a hard stop before the model call
        return _aborted(deps, job, ctx)
    except BaseTimeoutException:
        _commit(deps, job, ctx.thread, None, TOOK_TOO_LONG, failed=True)
        raise
    except openai.APIError as exc:
        if abort.aborted():  # threads pool: a hard stop cut the model call
            return _aborted(deps, job, ctx)
        log.warning("turn in %s failed: %s", job.session_key, type(exc).__name__)
        why = _short_error(exc, model, model_name)
        return Answer(
            _with_spawns(f"{Icon.WARNING} The model call failed: {why}.", ctx), failed=True
        )
    text = result.text.strip() or "(no answer)"
    if not result.complete:
        text += f"\n\n_(stopped after {meter.steps} steps)_"
    if meter.fallback_note:  # docs/models.md, "Fallbacks"
        text += f"\n\n_({meter.fallback_note})_"
    return Answer(text)


@dataclass(frozen=True)
class Answer:
    """A turn's reply, and whether it says the turn failed (no answer came)."""

    text: str
    failed: bool = False


def _keep_summary(deps: Deps, job: TurnJob, compacted: Compacted) -> None:
    """The session keeps the summary; the history entries it covers go (docs/models.md,
    "Threads that outgrow the window")."""
    deps.summaries.replace(job.session_key, compacted.summary, covered=compacted.covered)


def _pending(tools: list[Tool], steps: list[dict[str, Any]]) -> PendingStep:
    """What an earlier attempt left unfinished in its last step (nothing for a first)."""
    safe = {t.name for t in tools if t.repeat_safe}
    return pending_step(steps, repeat_safe=lambda name: name in safe)


def _finish_step(
    deps: Deps,
    job: TurnJob,
    pending: PendingStep,
    tools: list[Tool],
    ctx: ToolContext,
    messages: list[dict[str, Any]],
    meter: Meter,
    control: LoopControl,
    max_tool_chars: int,
    gate: Gate,
) -> None:
    """Complete the step an earlier attempt was in when its worker died: the call in
    flight answered as interrupted (or run again if safe: a call a person approved runs
    with the approved arguments, not asked again), the calls after it run through the
    gate."""
    for note in pending.interrupted:
        messages.append(note)
        control.record(note)
    if pending.names:
        log.warning("turn resumed: the call to %s was interrupted", ", ".join(pending.names))
    calls = list(pending.calls)
    approved = approved_call(deps, job.approval_id, calls[0]) if pending.repeated else None
    if approved is not None:
        run_calls([approved], tools=tools, ctx=ctx, messages=messages, meter=meter,
                  control=control, max_tool_chars=max_tool_chars)  # fmt: skip
        calls = calls[1:]
    if calls:
        run_calls(calls, tools=tools, ctx=ctx, messages=messages, meter=meter,
                  control=control, max_tool_chars=max_tool_chars, gate=gate)  # fmt: skip


def _aborted(deps: Deps, job: TurnJob, ctx: ToolContext) -> Answer:
    """The turn's answer when its run was aborted (threads pool): stopped; or, at the job's
    hard time limit, the timeout line, and the limit is raised on as RQ's own would be."""
    current = abort.current()
    if current is not None and current.timed_out:
        _commit(deps, job, ctx.thread, None, TOOK_TOO_LONG, failed=True)
        raise JobTimeoutException(current.reason)
    return Answer(_with_spawns(STOPPED_IN_MODEL_CALL, ctx))


def _with_spawns(text: str, ctx: ToolContext) -> str:
    if ctx.spawned:
        text += f" {len(ctx.spawned)} subagent(s) already started will still report here."
    return text


def _short_error(exc: openai.APIError, model: ChatModel, model_name: str) -> str:
    return model_error_text(exc, base_url=model.base_url, model=model_name)


def _commit(
    deps: Deps,
    job: TurnJob,
    thread: ThreadRef,
    user_message: dict[str, Any] | None,
    text: str,
    *,
    failed: bool = False,
) -> None:
    reply = Outbound(
        thread=thread,
        text=clip_markdown(text, deps.settings.gateway.max_outbound_chars),
        kind=OutboundKind.REPLY,
        failed=failed,
        idempotency_key=job.reply_key,
        traceparent=tracing.traceparent(),
    )
    entries = [m for m in (user_message, {"role": "assistant", "content": text}) if m]
    with deps.connection.batch() as pipe:
        deps.history.append(job.session_key, *entries, pipe=pipe)
        deps.outbox.put(reply, pipe=pipe)
        deps.turn_attempts.finish(job.reply_key, pipe=pipe)  # answered: never run again
        pipe.execute()
    log.info("turn in %s answered at %.3f", job.session_key, time.time())
