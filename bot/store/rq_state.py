"""RQ's state as the maintenance repair reads and changes it (:mod:`workers.repair`).

RQ owns these structures (its jobs, queues, started registries, executions and workers);
this module is fanbot's one place that reads them beyond RQ's everyday API, through the key
names RQ's own classes expose, and the one place that puts a lost job back in its queue.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil
from redis import Redis, WatchError
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimitRegistry
from rq.serializers import JSONSerializer

from bot.store import as_text

log = logging.getLogger(__name__)


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


def observe_lanes(
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
