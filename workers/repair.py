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

then each lane lets its next waiting jobs through and is dropped once empty. A requeue is a
transaction on the job's status, so a job that started meanwhile is left alone, and the
stale execution entry is removed first, so rq can never fail the new run for the old one.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psutil
from redis import Redis, WatchError
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimitRegistry
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.utils import as_text

from bot.deps import Deps
from bot.store.lost_jobs import LostJobs

log = logging.getLogger(__name__)

_HOLDS_SLOT = (JobStatus.QUEUED, JobStatus.STARTED)


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


@dataclass(frozen=True, kw_only=True)
class Holder:
    """What one sweep saw of a job in a lane's ``allowed`` set.

    Attributes:
        job_id: The RQ job.
        lane: The rate-limit key (``turn:<session>`` or ``subagents``).
        status: RQ's status of the job; None when its hash is gone.
        origin: Its queue's name.
        in_queue: Its id is in the queue list (waiting for any worker).
        executing: It has an execution whose heartbeat deadline is still ahead.
        worker_alive: The worker of such an execution is alive.
        lost_since: When a sweep first saw it queued in no queue; None if never.
    """

    job_id: str
    lane: str
    status: str | None
    origin: str = ""
    in_queue: bool = False
    executing: bool = False
    worker_alive: bool = False
    lost_since: float | None = None


def decide(holder: Holder, *, now: float, grace: float) -> Action:
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


def repair_jobs(deps: Deps, *, now: float | None = None) -> Repaired:
    """One repair pass over every rate-limit lane; see the module docstring."""
    now = time.time() if now is None else now
    lost = LostJobs(redis=deps.redis, keys=deps.keys)
    lanes = RateLimitRegistry.all(deps.redis)
    grace = deps.settings.subagents.stale_after_seconds
    holders = _observe(deps.redis, lanes, lost.since(), now=now)
    plan = [(h, decide(h, now=now, grace=grace)) for h in holders]
    done = _act(deps.redis, plan, now=now)
    for lane in lanes:
        lane.cleanup()  # lets waiting jobs take the freed slots; drops the lane once empty
    lost.remember(_still_lost(plan, now=now))
    return done


def _act(conn: Redis, plan: Iterable[tuple[Holder, Action]], *, now: float) -> Repaired:
    done = Repaired()
    abandon_in: set[str] = set()
    for holder, action in plan:
        if action is Action.REQUEUE and requeue_lost(conn, holder.job_id):
            log.warning("requeued lost job %s of lane %s", holder.job_id, holder.lane)
            done.requeued.append(holder.job_id)
        elif action is Action.RELEASE:
            RateLimitRegistry(holder.lane, conn).release_stale_and_enqueue(holder.job_id)
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
        registry = StartedJobRegistry(origin, connection=conn, serializer=JSONSerializer)
        registry.cleanup(timestamp=now)  # rq fails it (AbandonedJobError) and frees its slot
    return done


def _still_lost(plan: Iterable[tuple[Holder, Action]], *, now: float) -> dict[str, float]:
    return {
        h.job_id: now if a is Action.NOTE else (h.lost_since or now)
        for h, a in plan
        if a in (Action.NOTE, Action.WAIT)
    }


# --- reading RQ's state --------------------------------------------------------------------


def _observe(
    conn: Redis, lanes: Iterable[RateLimitRegistry], lost: Mapping[str, float], *, now: float
) -> list[Holder]:
    holders = []
    for lane in lanes:
        for job_id in lane.get_allowed_job_ids():
            try:
                holders.append(
                    observe(conn, lane.key, job_id, now=now, lost_since=lost.get(job_id))
                )
            except Exception:  # one malformed job must not stop the repair of the others
                log.warning("cannot inspect job %s of lane %s", job_id, lane.key, exc_info=True)
    return holders


def observe(
    conn: Redis, lane: str, job_id: str, *, now: float, lost_since: float | None = None
) -> Holder:
    """Read what :func:`decide` needs about one slot holder."""
    try:
        job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
    except NoSuchJobError:
        return Holder(job_id=job_id, lane=lane, status=None)
    queue = Queue(job.origin, connection=conn, serializer=JSONSerializer)
    executing, worker_alive = _execution_state(conn, job, now=now)
    return Holder(
        job_id=job_id,
        lane=lane,
        status=job.get_status(refresh=False),
        origin=job.origin,
        in_queue=queue.get_job_position(job_id) is not None,
        executing=executing,
        worker_alive=worker_alive,
        lost_since=lost_since,
    )


def _execution_state(conn: Redis, job: Job, *, now: float) -> tuple[bool, bool]:
    """(an execution's heartbeat deadline is ahead, the worker of such an execution lives)."""
    executing = alive = False
    for execution in _executions(conn, job):
        deadline = conn.zscore(job.started_job_registry.key, execution.composite_key)
        if deadline is not None and deadline > now:
            executing = True
            alive = alive or worker_alive(conn, execution.worker_name)
    return executing, alive


def _executions(conn: Redis, job: Job) -> list[Execution]:
    """The job's executions; a bare one (no worker name) where rq's hash has expired."""
    found = []
    for execution_id in ExecutionRegistry(job.id, conn).get_execution_ids():
        try:
            found.append(Execution.fetch(execution_id, job.id, conn))
        except ValueError:  # its hash expired with its heartbeat TTL
            found.append(Execution(execution_id, job.id, conn))
    return found


def worker_alive(conn: Redis, name: str) -> bool:
    """Whether the RQ worker ``name`` runs: its key is alive, and on this host, its process.

    A worker on another host counts as alive until its key expires; its executions expire
    sooner anyway, so this errs on the side of not touching a job.
    """
    if not name:
        return False
    data = conn.hgetall(Worker.redis_worker_namespace_prefix + name)
    if not data or b"death" in data:
        return False
    pid = int(data.get(b"pid") or 0)
    if as_text(data.get(b"hostname") or b"") != socket.gethostname() or not pid:
        return True
    return _process_running(pid)


def _process_running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return os.getpid() != pid  # exists, owned by someone else


# --- acting on it ----------------------------------------------------------------------------


def requeue_lost(conn: Redis, job_id: str) -> bool:
    """Put a lost ``queued`` job back at the front of its queue; False if it moved meanwhile.

    The job keeps its concurrency slot (it never gave it up). Its stale executions go first,
    so rq's started-registry cleanup never fails the new run for the old one.
    """
    job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
    queue = Queue(job.origin, connection=conn, serializer=JSONSerializer)
    stale = _executions(conn, job)
    with conn.pipeline() as pipe:
        try:
            pipe.watch(job.key)  # type: ignore[no-untyped-call]  # the horse writes ``started`` here
            if pipe.hget(job.key, "status") != JobStatus.QUEUED.value.encode():
                return False
            if queue.get_job_position(job_id) is not None:
                return False  # only this sweep (under its lease) re-pushes a queued job
            pipe.multi()
            for execution in stale:
                execution.delete(job=job, pipeline=pipe)
            pipe.lrem(queue.intermediate_queue_key, 0, job_id)
            pipe.delete(queue.intermediate_queue.get_first_seen_key(job_id))
            queue.push_job_id(job_id, pipeline=pipe, at_front=True)
            pipe.execute()
        except WatchError:
            return False
    return True
