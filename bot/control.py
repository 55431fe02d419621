"""Stopping runs and turns over Redis and RQ (DESIGN §8), and finding the runs in scope.

Stop, for one run:

1. set its stop flag (the run checks it between steps, and RQ's callbacks read it);
2. queued: cancel the RQ job first — ``Job.cancel`` gives its concurrency slot to the next
   waiting run (finalize only drops the slot, it promotes nobody);
3. finalize ``stopped`` right away, keeping the partial result the run recorded, so the
   status and the announce never wait for a model call to return;
4. running (or started meanwhile): hard-stop the work horse with ``send_stop_job_command``.
   That is a fire-and-forget pub/sub message, so the run also goes into ``stops:pending``
   and the maintenance sweep re-sends it while the job still executes after
   ``subagents.hard_kill_grace_seconds``.

``/stop`` also sets the session's turn-stop flag; the executing turn job goes into
``stops:pending`` too and is hard-stopped by the sweep if the flag did not end it in time.

The run's own finalize, when its horse gets that far, is then a no-op.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import cast

from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from bot.announce import format_duration, format_tokens
from bot.commands.resolve import channel_scope
from bot.deps import TURNS_QUEUE, Deps
from bot.finalize import finalize_run
from bot.sessions import qualified_user
from bot.types import RunRecord, RunStatus, ThreadRef

log = logging.getLogger(__name__)

GIVE_UP_AFTER_SECONDS = 600
"""Stop re-sending hard stops for a run this long after it ended (the job is stuck elsewhere)."""
TURN_MEMBER = "turn:"
"""``stops:pending`` members with this prefix name a turn job; the others are run ids."""


@dataclass(frozen=True, kw_only=True)
class StopResult:
    """What stopping one run did.

    Attributes:
        run_id: The run.
        was: Its status before the stop.
        ended: True if this stop made the terminal transition.
        hard_stop_sent: True if a stop command went to the worker executing it.
    """

    run_id: str
    was: RunStatus
    ended: bool = False
    hard_stop_sent: bool = False


def stop_run(deps: Deps, run_id: str, *, by: str) -> StopResult:
    """Stop ``run_id`` (see the module docstring); ``by`` names who asked, for the notes."""
    record = deps.runs.get(run_id)
    if record is None:
        return StopResult(run_id=run_id, was=RunStatus.UNKNOWN)
    if record.status.terminal:
        return StopResult(run_id=run_id, was=record.status)
    deps.runs.request_stop(run_id)
    executing = record.status is RunStatus.RUNNING
    if not executing:
        executing = _cancel_queued(deps, record.job_id)
    ended = finalize_run(
        deps, run_id, status=RunStatus.STOPPED, result=None, notes=stop_note(deps, record, by)
    )
    sent = _hard_stop(deps, record) if executing else False
    log.info("run %s stopped by %s (ended=%s, hard stop=%s)", run_id, by, ended, sent)
    return StopResult(run_id=run_id, was=record.status, ended=ended, hard_stop_sent=sent)


def stop_note(deps: Deps, record: RunRecord, by: str, *, now: float | None = None) -> str:
    """The announce's Notes for a stop: who, and how far the run had got."""
    now = now or time.time()
    if record.status is RunStatus.QUEUED or record.started_at is None:
        return f"stopped by {by} before it started"
    steps = deps.transcripts.length(record.session_id)
    ran = format_duration(now - record.started_at)
    tokens = format_tokens(record.usage.total)
    progress = f"{steps} transcript message(s), {tokens} tokens so far"
    partial = "; the result is partial" if record.result.strip() else ""
    return f"stopped by {by} after {ran} ({progress}){partial}"


def _cancel_queued(deps: Deps, job_id: str) -> bool:
    """Cancel a job that has not started; True if it is already executing instead."""
    try:
        job = Job.fetch(job_id, connection=deps.redis, serializer=JSONSerializer)
    except NoSuchJobError:
        return False
    if job.get_status(refresh=False) is JobStatus.STARTED:
        return True
    try:
        job.cancel()
    except InvalidJobOperation:  # canceled already, e.g. by an earlier stop
        return False
    return False


def _hard_stop(deps: Deps, record: RunRecord) -> bool:
    grace = deps.settings.subagents.hard_kill_grace_seconds
    deps.redis.zadd(deps.keys.stops_pending, {record.run_id: time.time() + grace})
    return send_stop(deps, record.job_id)


def send_stop(deps: Deps, job_id: str) -> bool:
    """Ask the worker executing ``job_id`` to kill its horse; False if nobody executes it."""
    try:
        send_stop_job_command(deps.redis, job_id, serializer=JSONSerializer)
    except (NoSuchJobError, InvalidJobOperation):
        return False
    return True


def resend_hard_stops(deps: Deps, *, now: float | None = None) -> list[str]:
    """Maintenance: re-send the stop of runs whose job still executes after the grace."""
    now = now or time.time()
    key = deps.keys.stops_pending
    grace = deps.settings.subagents.hard_kill_grace_seconds
    resent: list[str] = []
    for raw in deps.redis.zrangebyscore(key, "-inf", now, start=0, num=100):
        member = raw.decode() if isinstance(raw, bytes) else str(raw)
        job_id = _pending_job(deps, member, now)
        if job_id is None or not _executing(deps, job_id):
            deps.redis.zrem(key, member)
            continue
        log.warning("job %s still executes after its stop; (re-)sending the stop", job_id)
        send_stop(deps, job_id)
        deps.redis.zadd(key, {member: now + max(grace, 0.5)})
        resent.append(member)
    return resent


def _pending_job(deps: Deps, member: str, now: float) -> str | None:
    """The job to re-check for a ``stops:pending`` member; None once it is not worth it."""
    if member.startswith(TURN_MEMBER):
        return member.removeprefix(TURN_MEMBER)
    record = deps.runs.get(member)
    if record is None:
        return None
    if now - (record.ended_at or now) > GIVE_UP_AFTER_SECONDS:
        log.warning("run %s: its job still executes long after the stop; giving up", member)
        return None
    return record.job_id


def _executing(deps: Deps, job_id: str) -> bool:
    try:
        job = Job.fetch(job_id, connection=deps.redis, serializer=JSONSerializer)
    except NoSuchJobError:
        return False
    return job.get_status() is JobStatus.STARTED and bool(job.worker_name)


@dataclass(frozen=True, kw_only=True)
class TurnInfo:
    """The executing main-agent turn of a session: its job and whose message it answers."""

    job_id: str
    owner: str


def running_turn(deps: Deps, session_key: str) -> TurnInfo | None:
    """The session's executing turn, if any (found in RQ's started registry of ``turns``)."""
    registry = StartedJobRegistry(TURNS_QUEUE, connection=deps.redis, serializer=JSONSerializer)
    for job_id in registry.get_job_ids():
        try:
            job = Job.fetch(job_id, connection=deps.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            continue
        payload = job.args[0] if job.args and isinstance(job.args[0], dict) else {}
        if payload.get("session_key") == session_key:
            owner = qualified_user(str(payload.get("platform")), str(payload.get("sender_id")))
            return TurnInfo(job_id=job_id, owner=owner)
    return None


def stop_turn(deps: Deps, session_key: str, *, job_id: str | None = None) -> None:
    """Ask the session's running turn to end at its next step (it answers "Stopped.").

    A turn blocked in a long model call never reaches its next step, so ``job_id`` (the
    executing turn) also goes into ``stops:pending``: the sweep hard-stops it if it still
    executes after the grace.
    """
    ttl = deps.settings.turn_timeout_seconds
    deps.redis.set(deps.keys.turn_stop(session_key), "1", ex=ttl)
    if job_id:
        due = time.time() + deps.settings.subagents.hard_kill_grace_seconds
        deps.redis.zadd(deps.keys.stops_pending, {TURN_MEMBER + job_id: due})


def scope_runs(deps: Deps, *, session_key: str, thread: ThreadRef) -> list[RunRecord]:
    """Runs a command in ``thread`` may address, newest first.

    Normally the runs spawned from ``session_key``. A channel-level Slack message (the
    ``/subagents`` slash command carries no thread) addresses every run of that channel:
    the channel session and each ``<session>:thread:<ts>`` session under it.
    """
    if not channel_scope(thread):
        return deps.runs.session_runs(session_key)
    pattern = deps.keys.session_runs(_glob_escape(session_key) + ":*")
    keys = [deps.keys.session_runs(session_key)]
    keys += [k.decode() for k in deps.redis.scan_iter(match=pattern, count=500)]
    scored: dict[str, float] = {}
    for key in keys:
        pairs = cast("list[tuple[bytes, float]]", deps.redis.zrange(key, 0, -1, withscores=True))
        for member, score in pairs:
            scored[member.decode()] = float(score)
    newest_first = sorted(scored, key=lambda i: scored[i], reverse=True)
    return [
        r
        for r in deps.runs.get_many(newest_first)
        if r.thread.platform == thread.platform and r.thread.chat == thread.chat
    ]


def transcript_key(deps: Deps, record: RunRecord) -> str:
    """Where the run's transcript is now: the live key, else its newest archived copy."""
    live = deps.keys.transcript(record.session_id)
    if record.archived_at is not None:
        return f"{live}.deleted.{int(record.archived_at)}"
    if deps.redis.exists(live):
        return live
    archived = sorted(
        (k.decode() for k in deps.redis.scan_iter(match=_glob_escape(live) + ".deleted.*")),
        key=lambda k: int(k.rsplit(".", 1)[-1]) if k.rsplit(".", 1)[-1].isdigit() else 0,
    )
    return archived[-1] if archived else live


def is_archived(deps: Deps, record: RunRecord) -> bool:
    return transcript_key(deps, record) != deps.keys.transcript(record.session_id)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
