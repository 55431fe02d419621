"""Repair of RQ jobs that a dying worker dropped, so no thread waits forever for its turn.

Why (measured on rq 3.0 by SIGKILLing ``fanbot worker`` processes; see
``tests/faults/test_turn_wedge.py``): a job can be left ``queued`` in *no* queue list while
it still holds its concurrency slot (the ``RateLimit`` ``allowed`` set), and then nothing in
rq ever moves it again:

- a SIGKILLed worker's pending ``BLPOP``/``BLMOVE`` still takes a job pushed several
  milliseconds after the kill (up to ~10 ms measured: the kernel closes a dying process's
  socket only late in its exit), and the reply goes nowhere;
- a worker killed between its pop and its horse writing ``started`` leaves the job
  ``queued``, with no execution or with one in the started registry, whose cleanup skips
  any job that is not ``started``;
- a single-queue worker's ``BLMOVE`` parks it in ``rq:queue:<name>:intermediate``, which
  rq fails (never requeues) at a maintenance pass a minute or more later.

rq's ``RateLimitRegistry.cleanup`` counts a ``queued`` holder as legitimate, so the
session's one-turn slot stays taken and every later message of that thread waits in
``rate_limited`` for good. A turn whose host died while it was ``started`` is abandoned by
rq only at some worker's maintenance (at its start, then every ten minutes).

What a sweep does, for every job holding a slot in any rate-limit lane (``turn:<session>``
and ``subagents``), decided by the pure :func:`decide` and then acted on:

- ``queued`` in no queue and not being picked up by a live worker: noted on first sight,
  put back at the front of its queue once it has stayed lost for the grace period
  (``subagents.stale_after_seconds``; a live worker goes from pop to ``started`` in
  milliseconds), keeping its slot;
- ``started`` with no unexpired execution (no worker heartbeat for rq's execution TTL):
  abandoned through rq's own started-registry cleanup, which fails it and frees its slot.
  It is never requeued: a turn runs at most once;
- finished, failed, stopped, canceled or gone: its slot is freed;

then each lane lets its next waiting jobs through and is dropped once empty. The subagent
slots (``fair:slots``, :mod:`bot.store.fair`) are repaired the same way as a lane, except
that a slot is freed only once its run has ended (or parked to wait for its children):
until then the reaper owns it. A queued run whose held job is in no line at all (the line
lost with Redis's last second of writes) is put back in it. A requeue is a
transaction on the job's status, so a job that started meanwhile is left alone, and the
stale execution entry is removed first, so rq can never fail the new run for the old one.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rq.job import JobStatus

from bot.deps import Deps
from bot.store.rq_layout import LaneHolder
from bot.types import RunStatus

log = logging.getLogger(__name__)

_HOLDS_SLOT = (JobStatus.QUEUED, JobStatus.STARTED)
FAIR_LANE = "fair:subagents"
"""How the subagent slots are named in a :class:`LaneHolder` (not an RQ lane)."""


class Action(enum.StrEnum):
    """What the sweep does about one job holding a concurrency slot."""

    KEEP = "keep"
    """Queued in its queue, or executing: nothing to repair."""
    NOTE = "note"
    """Queued in no queue, seen so for the first time: remember when."""
    WAIT = "wait"
    """Lost, but not for the whole grace period yet: a live worker may still start it."""
    REQUEUE = "requeue"
    """Lost for longer than the grace period: back to the front of its queue."""
    ABANDON = "abandon"
    """Started, but its execution expired (no worker heartbeat): rq fails it, frees the slot."""
    RELEASE = "release"
    """Finished, failed, stopped, canceled or gone: the slot is free to take."""


def decide(holder: LaneHolder, *, now: float, grace: float) -> Action:
    """The repair for one slot holder (pure).

    Args:
        holder: What the sweep saw.
        now: The sweep's clock.
        grace: How long a job must stay lost before it is requeued.
    """
    if holder.status not in _HOLDS_SLOT:
        return Action.RELEASE
    if holder.status == JobStatus.STARTED:
        return Action.KEEP if holder.executing else Action.ABANDON
    if holder.in_queue or (holder.executing and holder.worker_alive):
        return Action.KEEP
    if holder.lost_since is None:
        return Action.NOTE
    return Action.REQUEUE if now - holder.lost_since >= grace else Action.WAIT


@dataclass(kw_only=True)
class Repaired:
    """Job ids a sweep acted on, by action."""

    requeued: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    rejoined: list[str] = field(default_factory=list)


def repair_jobs(deps: Deps, *, now: float | None = None) -> Repaired:
    """One repair pass over every rate-limit lane; see the module docstring."""
    now = time.time() if now is None else now
    lanes = deps.rq.lanes()
    grace = deps.settings.subagents.stale_after_seconds
    since = deps.lost_jobs.since()
    holders = deps.rq.observe_lanes(lanes, since, now=now)
    holders += _fair_holders(deps, since, now=now)
    plan = [(h, decide(h, now=now, grace=grace)) for h in holders]
    done = _act(deps, plan, now=now)
    for lane in lanes:
        lane.cleanup()  # lets waiting jobs take the freed slots; drops the lane once empty
    deps.lost_jobs.remember(_still_lost(plan, now=now))
    done.rejoined = _rejoin_lines(deps, now=now, grace=grace)
    return done


def _rejoin_lines(deps: Deps, *, now: float, grace: float) -> list[str]:
    """Queued runs whose held job is in no line (lost with Redis's last writes): back in it."""
    active = deps.runs.get_many(sorted(deps.runs.active_ids()))
    due = {
        r.run_id: r.session_key
        for r in active
        if r.status is RunStatus.QUEUED and now - r.created_at >= grace and r.parked_at is None
    }
    sub = deps.settings.subagents
    rejoined = deps.jobs.fair.rejoin(
        due, max_concurrent=sub.max_concurrent, cap=sub.max_concurrent_per_session
    )
    if rejoined:
        log.warning("put %d run(s) back in line: %s", len(rejoined), ", ".join(rejoined))
    return rejoined


def _fair_holders(deps: Deps, since: Mapping[str, float], *, now: float) -> list[LaneHolder]:
    holders = []
    for run_id in deps.jobs.fair.holders():
        job_id = _slot_job(deps, run_id)
        try:
            holders.append(
                deps.rq.observe(FAIR_LANE, job_id, now=now, lost_since=since.get(job_id))
            )
        except Exception:  # one malformed job must not stop the repair of the others
            log.warning("cannot inspect the job of run %s", run_id, exc_info=True)
    return holders


def _slot_job(deps: Deps, run_id: str) -> str:
    """The job that holds ``run_id``'s slot: its admitted resume job while it is parked
    (a dead worker may have dropped that one too), else the job executing it (its own, id
    = run id; a resume job; the recovery job of a later attempt)."""
    record = deps.runs.get(run_id)
    if record is None:
        return run_id
    if record.parked_at is not None and record.resume_job:
        return record.resume_job
    return record.executing_job


def _release_fair(deps: Deps, job_id: str) -> str:
    """Free a subagent slot whose job is done, once its run has ended or parked; the run
    whose slot was freed ("" = none)."""
    run_id = deps.rq.run_of(job_id)
    record = deps.runs.get(run_id)
    if record is not None and not record.status.terminal and record.parked_at is None:
        return ""
    return run_id if deps.jobs.fair.release(run_id) else ""


def _act(deps: Deps, plan: Iterable[tuple[LaneHolder, Action]], *, now: float) -> Repaired:
    done = Repaired()
    abandon_in: set[str] = set()
    for holder, action in plan:
        if action is Action.REQUEUE and deps.rq.requeue_lost(holder.job_id):
            log.warning("requeued lost job %s of lane %s", holder.job_id, holder.lane)
            done.requeued.append(holder.job_id)
        elif action is Action.RELEASE and holder.lane == FAIR_LANE:
            if freed := _release_fair(deps, holder.job_id):
                log.warning("freed the subagent slot of run %s", freed)
                done.released.append(freed)
        elif action is Action.RELEASE:
            deps.rq.release_lane_slot(holder.lane, holder.job_id)
            log.warning(
                "freed the %s slot of job %s (%s)",
                holder.lane,
                holder.job_id,
                holder.status or "gone",
            )
            done.released.append(holder.job_id)
        elif action is Action.ABANDON:
            abandon_in.add(holder.origin)
            done.abandoned.append(holder.job_id)
    for origin in sorted(abandon_in):
        deps.rq.abandon_started(origin, now=now)  # rq fails it and frees its slot
    return done


def _still_lost(plan: Iterable[tuple[LaneHolder, Action]], *, now: float) -> dict[str, float]:
    return {
        h.job_id: now if a is Action.NOTE else (h.lost_since or now)
        for h, a in plan
        if a in (Action.NOTE, Action.WAIT)
    }
