"""Fan-in: when every run one main-agent turn waited for has ended, the main agent gets
exactly one continuation turn in the requester session, with each run's status and result,
so it can reconcile them, answer once, or spawn the next step.

Who decides, and why it is exactly once (the states are in :mod:`bot.store.joins`):

- the turn plans a join (:func:`plan_join`); its spawns with ``join=true`` join it in the
  script that records each run, and only while it is open; the turn seals it when it ends,
  and the maintenance sweep seals a join whose turn died (:func:`seal_abandoned`);
- the join fires in a Redis script, never in a process: in the seal when every run had
  ended, else in the terminal transition of its last run (the finalize script). Whatever
  ends runs (the job, a callback, the reaper, a stop) therefore fires it once;
- a fired join waits on ``joins:ready``; the process that fired it dispatches at once, and
  the sweep dispatches what a dead process left (:func:`dispatch_due`). Dispatch enqueues
  the continuation under the fixed job id ``join-<id>`` (enqueued once), and the
  continuation turn ``start``\\ s the join (one caller wins);
- ``/stop`` cancels the session's joins not yet started (:func:`cancel_joins`).

Chains (explore -> plan -> implement) go on by themselves: a continuation's own spawns
open the next round's join, up to ``subagents.max_chain`` rounds per user message.
``subagents.announce = "cards"`` turns all of this off.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from bot.config import Settings
from bot.deps import Deps
from bot.hooks.chain import NO_HOOKS, Hooks, at_fan_in
from bot.models.tokens import CHARS_PER_TOKEN, SAFETY_MARGIN
from bot.models.window import window_for
from bot.observe import tracing
from bot.runs.access import Actor
from bot.runs.line import slot_job
from bot.runs.naming import run_title
from bot.runs.render import QUIET_LINE, history_note, is_quiet
from bot.runs.type_registry import subagent_types
from bot.sessions import qualified_user
from bot.store.jobs import TurnJob
from bot.store.joins import JoinRecord
from bot.text.sentences import clip_sentences
from bot.types import FAN_IN_MARK, RunRecord

log = logging.getLogger(__name__)

JOB_PREFIX = "join-"
INLINE_RESULTS_CHARS = 48_000
"""Results that are no longer in the loaded history are repeated in the continuation's
prompt, all of them together at most this many characters."""
FAN_IN_SHARE = 0.3
"""And at most this share of the main agent's model's window (when it is known), each
result shortened at a sentence or paragraph end (docs/models.md)."""
MIN_RESULT_CHARS = 200
"""A repeated result keeps at least this many characters, however many runs there are."""
ABANDONED_AFTER_SECONDS = 60
"""A join still open this long after its turn's timeout is sealed by the sweep."""


@dataclass(frozen=True, kw_only=True)
class JoinPlan:
    """The fan-in a turn's spawns join.

    Attributes:
        join_id: Derived from the session and the message, so a retried turn reuses it.
        session_key: The requester session.
        round: The continuation round it leads to (1 for a user's message).
        origin: The turn's thread, platform, sender and agent, for the continuation.
    """

    join_id: str
    session_key: str
    round: int
    origin: dict[str, Any]


def join_id_for(session_key: str, message_id: str) -> str:
    return hashlib.sha256(f"{session_key}\0{message_id}".encode()).hexdigest()[:24]


def plan_join(settings: Settings, job: TurnJob) -> JoinPlan | None:
    """The join this turn's spawns wait in; None when fan-in is off or the chain is done."""
    sub = settings.subagents
    if sub.announce == "cards" or job.chain + 1 > sub.max_chain:
        return None
    return JoinPlan(
        join_id=join_id_for(job.session_key, job.message_id),
        session_key=job.session_key,
        round=job.chain + 1,
        origin={
            "thread": job.thread,
            "platform": job.platform,
            "sender_id": job.sender_id,
            "sender_name": job.sender_name,
            "agent_id": job.agent_id,
            "is_dm": job.is_dm,
        },
    )


def may_nest(settings: Settings, record: RunRecord) -> bool:
    """An orchestrator run above the depth limit may spawn children."""
    sub_type = subagent_types(settings).get(record.subagent_type)
    return (
        sub_type is not None
        and sub_type.role == "orchestrator"
        and sub_type.runnable is None
        and record.depth < settings.subagents.max_spawn_depth
    )


def plan_run_join(settings: Settings, record: RunRecord, rounds: int) -> JoinPlan | None:
    """The fan-in an orchestrator's children join in its round ``rounds + 1``; None when it
    may not nest or has used its ``max_chain`` rounds. When it fires, the run resumes."""
    if not may_nest(settings, record) or rounds >= max(1, settings.subagents.max_chain):
        return None
    platform, _, user = record.requester.partition(":")
    return JoinPlan(
        join_id=f"{record.run_id}-{rounds + 1}",
        session_key=record.session_key,
        round=rounds + 1,
        origin={"run_id": record.run_id, "platform": platform, "sender_id": user},
    )


def chain_exhausted(settings: Settings, job: TurnJob) -> bool:
    """Fan-in is on, but this turn's spawns would exceed ``max_chain`` rounds."""
    sub = settings.subagents
    return sub.announce != "cards" and job.chain + 1 > sub.max_chain


def open_join(deps: Deps, plan: JoinPlan) -> bool:
    """Create the plan's join if needed; True while runs may still join it."""
    return deps.joins.open(
        plan.join_id, session_key=plan.session_key, round_=plan.round, origin=plan.origin
    )


def seal_join(deps: Deps, join_id: str) -> None:
    """The turn has ended: no more runs join. Dispatches at once if every run had ended."""
    if deps.joins.seal(join_id):
        log.info("join %s fired at its seal", join_id)
        dispatch(deps, join_id, force=True)


def after_last_run(deps: Deps, join_id: str) -> None:
    """The finalize that fired ``join_id`` dispatches it (the sweep does if this dies)."""
    log.info("join %s fired by its last run", join_id)
    dispatch(deps, join_id, force=True)


def dispatch(deps: Deps, join_id: str, *, force: bool = False) -> bool:
    """Enqueue the continuation of a fired join; True if this call did it."""
    if not deps.joins.claim(join_id, force=force):
        return False
    join = deps.joins.get(join_id)
    if join is None or join.state != "fired":
        deps.joins.dispatched(join_id)
        return False
    job_id = JOB_PREFIX + join_id
    if deps.jobs.exists(job_id):  # enqueued by a dispatcher that died before the ZREM
        deps.joins.dispatched(join_id)
        return False
    parent = str(join.origin.get("run_id") or "")
    if parent:
        _resume_parent(deps, parent, join_id, job_id)
    else:
        deps.jobs.enqueue_turn(
            continuation_job(join), job_id=job_id, timeout=deps.settings.turn_timeout_seconds
        )
    deps.joins.dispatched(join_id)
    log.info("join %s: continuation enqueued (%d run(s))", join_id, len(join.run_ids))
    return True


def _resume_parent(deps: Deps, run_id: str, join_id: str, job_id: str) -> None:
    """Enqueue the job that resumes a parked orchestrator with its children's results."""
    record = deps.runs.get(run_id)
    if record is None or record.status.terminal:
        return
    deps.jobs.enqueue_resume(
        slot_job(
            deps.settings,
            record,
            run_id=run_id,
            description=f"{run_title(record, noun='subagent', name='none')} resumes after "
            "its subagents",
        ),
        job_id=job_id,
        join_id=join_id,
    )


def continuation_job(join: JoinRecord) -> TurnJob:
    origin = join.origin
    return TurnJob(
        session_key=join.session_key,
        thread=origin["thread"],
        platform=origin["platform"],
        sender_id=origin["sender_id"],
        sender_name=origin.get("sender_name", ""),
        text="",
        message_id=JOB_PREFIX + join.join_id,
        agent_id=origin.get("agent_id", "main"),
        is_dm=bool(origin.get("is_dm", False)),
        kind="join",
        join_id=join.join_id,
        chain=join.round,
        traceparent=tracing.traceparent(),  # the finalize that fired it: same trace
    )


def dispatch_due(deps: Deps) -> list[str]:
    """Maintenance: dispatch fired joins whose firer did not (it died, or Redis blinked)."""
    return [j for j in deps.joins.ready_due() if dispatch(deps, j)]


def seal_abandoned(deps: Deps, *, now: float | None = None) -> list[str]:
    """Maintenance: seal joins whose turn died before sealing them."""
    now = time.time() if now is None else now
    cutoff = now - deps.settings.turn_timeout_seconds - ABANDONED_AFTER_SECONDS
    sealed = deps.joins.open_before(cutoff)
    for join_id in sealed:
        log.warning("join %s: its turn never sealed it; sealing", join_id)
        seal_join(deps, join_id)
    return sealed


def cancel_joins(
    deps: Deps, session_key: str, runs: list[RunRecord], *, actor: Actor | None = None
) -> int:
    """``/stop``: cancel the session's joins (and those of ``runs``) not yet continued;
    returns how many this cancelled. With an ``actor``, only joins whose message they
    sent, unless they are an admin (None: the console, which owns everything)."""
    join_ids = {*deps.joins.of_session(session_key), *(r.join_id for r in runs if r.join_id)}
    cancelled = 0
    for join_id in sorted(join_ids):
        join = deps.joins.get(join_id)
        if join is None or (actor is not None and not _may_cancel(actor, join)):
            continue
        cancelled += deps.joins.cancel(join_id)
    return cancelled


def _may_cancel(actor: Actor, join: JoinRecord) -> bool:
    origin = join.origin
    owner = qualified_user(str(origin.get("platform")), str(origin.get("sender_id")))
    return actor.is_admin or owner == actor.qualified


NOTE_OVERHEAD_CHARS = 160
"""What a repeated result's note adds around it (its title line and untrusted markers)."""


def results_chars(settings: Settings, agent_id: str) -> int:
    """Characters the repeated results may take together: :data:`INLINE_RESULTS_CHARS`, at
    most :data:`FAN_IN_SHARE` of the agent's model's window (pure)."""
    model = settings.agent(agent_id or None).model or settings.openai.model
    win = window_for(settings, model)
    if win is None:
        return INLINE_RESULTS_CHARS
    share = int(win.room * FAN_IN_SHARE * CHARS_PER_TOKEN / SAFETY_MARGIN)
    return min(INLINE_RESULTS_CHARS, share)


def continuation_prompt(
    deps: Deps, join: JoinRecord, history: list[dict[str, Any]], *, hooks: Hooks = NO_HOOKS
) -> str:
    """The continuation turn's input: each run's status, and its result where the loaded
    history no longer holds its note (finalize wrote one per run). The waiting agent's
    ``hooks`` see and may change the results first (docs/hooks.md)."""
    runs = at_fan_in(hooks, sorted(deps.runs.get_many(join.run_ids), key=lambda r: r.seq))
    seen = "\n".join(str(m.get("content", "")) for m in history)
    quiet = {r.run_id for r in runs if is_quiet(r)}  # answered ANNOUNCE_SKIP: nothing to show
    missing = [r for r in runs if r.run_id not in quiet and f"[{run_title(r)} (" not in seen]
    budget = results_chars(deps.settings, str(join.origin.get("agent_id") or "")) // max(
        1, len(missing)
    )
    budget = max(MIN_RESULT_CHARS, budget - NOTE_OVERHEAD_CHARS)
    lines = [
        f"{FAN_IN_MARK} All {len(runs)} subagent run(s) you waited for have ended:",
        *(
            f"- {run_title(r, kind='after')}: "
            + (QUIET_LINE if r.run_id in quiet else r.status.value)
            for r in runs
        ),
    ]
    if missing:
        lines += ["", "Results not shown above:"]
        lines += [
            history_note(
                r, status=r.status, result=clip_sentences(r.result, budget), max_chars=budget + 2
            )
            for r in missing
        ]
    with_results = len(runs) - len(quiet)
    where = "above" if len(missing) == with_results else "in the notes of this conversation"
    lines += [
        "",
        f"Their results are {where}. Reconcile them and answer the request once: do not "
        "repeat each result, combine them. If a run failed, was stopped or ended "
        "unexpectedly, say what is missing. If the work needs a next step, you may spawn it.",
    ]
    return "\n".join(lines)
