"""Everything fanbot does to RQ's own keys beyond RQ's everyday API, in one module.

RQ owns its structures (jobs, queues, registries, executions, workers); :mod:`bot.store.jobs`
uses its API. Two places need more, and both live here: the fair line of the subagent slots
(:mod:`bot.store.fair`), whose admission script saves, reads and enqueues RQ jobs inside
one Lua script (RQ has no API to do that atomically with fanbot's own keys), and the
maintenance repair (:mod:`workers.repair`), which reads and changes what a dying worker
left behind. Each assumption about RQ's layout, tested one by one in
``tests/integration/test_rq_layout.py`` so that an RQ upgrade that breaks one fails there
first:

1. A job is a hash at ``Job.key_for(id)`` = ``Job.redis_job_namespace_prefix + id``; its
   ``status`` field holds a :class:`~rq.job.JobStatus` value as text, ``enqueued_at`` a
   time in ``rq.utils.utcformat``; the fields of ``Job.to_dict()`` are what ``Job.save``
   writes, so saving them with ``HSET`` makes a job RQ fetches like one it saved.
2. RQ writes a job's hash with ``HSET`` (never deletes it first), so a field of fanbot's
   own (``fanbot_run``: the parked run a resume job continues) survives RQ's writes.
3. ``rate_limited`` is a status RQ's workers never pick up: a job saved with it and in no
   queue list waits, untouched, until someone enqueues it (fanbot's *held* job).
4. A queue is a list at ``Queue.key`` that workers pop from the left, and the set
   ``Queue.redis_queues_keys`` lists every queue's key: ``RPUSH`` of the id, ``SADD`` of
   the queue key and ``status=queued`` make a job enqueued, as ``Queue.enqueue_job`` does.
5. The concurrency lanes (``RateLimit``) are found with ``RateLimitRegistry.all``; each
   names its slot holders (``get_allowed_job_ids``), frees a stale one
   (``release_stale_and_enqueue``) and lets the next through (``cleanup``).
6. A job's executions are listed by ``ExecutionRegistry(job_id)``; each is a member
   (``Execution.composite_key``) of the started registry's sorted set scored by its
   heartbeat deadline, and ``Execution.fetch`` raises ``ValueError`` once its hash expired.
   ``StartedJobRegistry.cleanup`` fails a ``started`` job whose deadline passed.
7. A worker is a hash at ``Worker.redis_worker_namespace_prefix + name`` with ``pid``,
   ``hostname`` and, once it died, ``death``; ``Worker.all`` lists the live ones with the
   ``ip_address`` Redis saw.
8. A single-queue worker's ``BLMOVE`` parks a job in ``Queue.intermediate_queue_key``
   with a first-seen key (``intermediate_queue.get_first_seen_key``), and
   ``Queue.push_job_id(at_front=True)`` puts an id back at the head of the queue.
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
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from bot.store import as_text

log = logging.getLogger(__name__)

JOB_PREFIX = Job.redis_job_namespace_prefix
"""Assumption 1: the key of job ``id`` is this prefix and the id."""
QUEUES_KEY = Queue.redis_queues_keys
"""Assumption 4: the set of every queue's key."""
HELD_STATUS = JobStatus.RATE_LIMITED.value
"""Assumption 3: RQ status of a held job (RQ's own word for a job waiting for a slot)."""
RUN_FIELD = "fanbot_run"
"""Assumption 2: fanbot's field in a resume job's hash: the parked run it continues."""

RQ_LUA = f"""
-- RQ's job hashes and queue lists as bot/store/rq_layout.py describes them
local function rq_status(id)
  return redis.call('HGET', '{JOB_PREFIX}' .. id, 'status')
end
local function rq_held(id)
  return rq_status(id) == '{HELD_STATUS}'
end
local function rq_field(id, name)
  return redis.call('HGET', '{JOB_PREFIX}' .. id, name)
end
local function rq_run_of(id)
  return redis.call('HGET', '{JOB_PREFIX}' .. id, '{RUN_FIELD}') or id
end
local function rq_save(job_key, flat, from)
  redis.call('HSET', job_key, unpack(flat, from))
end
local function rq_register_queue(queues_key, queue_key)
  redis.call('SADD', queues_key, queue_key)
end
local function rq_enqueue(queue_key, id, enqueued_at)
  redis.call('RPUSH', queue_key, id)
  redis.call('HSET', '{JOB_PREFIX}' .. id, 'status', 'queued', 'enqueued_at', enqueued_at)
end
local function rq_save_enqueued(job_key, flat, from, queue_key, id, enqueued_at, front)
  -- rq_save, then rq_enqueue, with one HSET: a later field of one HSET wins; ``front``:
  -- at the head of the queue, the next job a worker pops (assumption 8)
  local fields = {{unpack(flat, from)}}
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = 'queued'
  fields[#fields + 1] = 'enqueued_at'
  fields[#fields + 1] = enqueued_at
  redis.call('HSET', job_key, unpack(fields))
  if front then
    redis.call('LPUSH', queue_key, id)
  else
    redis.call('RPUSH', queue_key, id)
  end
end
"""
"""Lua functions over RQ's keys for :mod:`bot.store.fair`'s and
:mod:`bot.store.recovery`'s scripts (assumptions 1-4, 8)."""


def job_fields(job: Job, *, resumes: str = "") -> list[str | bytes | int | float]:
    """The flat ``HSET`` arguments that save ``job`` as ``job.save()`` would (assumption 1),
    with the run a resume job continues (assumption 2)."""
    fields = job.to_dict()
    if resumes:
        fields[RUN_FIELD] = resumes
    flat: list[str | bytes | int | float] = []
    for name, value in fields.items():
        flat += [name, value]
    return flat


@dataclass(frozen=True, kw_only=True)
class LaneHolder:
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


class RqLayout:
    """RQ's state as fanbot's fair line and repair read and change it.

    Args:
        redis: Sync client (``decode_responses`` off, as RQ needs).
    """

    def __init__(self, *, redis: Redis) -> None:
        self.redis = redis

    def lanes(self) -> list[RateLimitRegistry]:
        """Every concurrency lane (assumption 5)."""
        return list(RateLimitRegistry.all(self.redis))

    def observe_lanes(
        self, lanes: Iterable[RateLimitRegistry], lost: Mapping[str, float], *, now: float
    ) -> list[LaneHolder]:
        holders = []
        for lane in lanes:
            for job_id in lane.get_allowed_job_ids():
                try:
                    holders.append(
                        self.observe(lane.key, job_id, now=now, lost_since=lost.get(job_id))
                    )
                except Exception:  # one malformed job must not stop the repair of the others
                    log.warning("cannot inspect job %s of lane %s", job_id, lane.key, exc_info=True)
        return holders

    def observe(
        self, lane: str, job_id: str, *, now: float, lost_since: float | None = None
    ) -> LaneHolder:
        """Read what :func:`workers.repair.decide` needs about one slot holder."""
        try:
            job = Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return LaneHolder(job_id=job_id, lane=lane, status=None)
        queue = Queue(job.origin, connection=self.redis, serializer=JSONSerializer)
        executing, alive = self._execution_state(job, now=now)
        return LaneHolder(
            job_id=job_id,
            lane=lane,
            status=job.get_status(refresh=False),
            origin=job.origin,
            in_queue=queue.get_job_position(job_id) is not None,
            executing=executing,
            worker_alive=alive,
            lost_since=lost_since,
        )

    def _execution_state(self, job: Job, *, now: float) -> tuple[bool, bool]:
        """(an execution's heartbeat deadline is ahead, the worker of such an execution
        lives); assumption 6."""
        executing = alive = False
        for execution in self._executions(job):
            deadline = self.redis.zscore(job.started_job_registry.key, execution.composite_key)
            if deadline is not None and deadline > now:
                executing = True
                alive = alive or self.worker_alive(execution.worker_name)
        return executing, alive

    def _executions(self, job: Job) -> list[Execution]:
        """The job's executions; a bare one (no worker name) where rq's hash has expired."""
        found = []
        for execution_id in ExecutionRegistry(job.id, self.redis).get_execution_ids():
            try:
                found.append(Execution.fetch(execution_id, job.id, self.redis))
            except ValueError:  # its hash expired with its heartbeat TTL
                found.append(Execution(execution_id, job.id, self.redis))
        return found

    def worker_alive(self, name: str) -> bool:
        """Whether the RQ worker ``name`` runs: its key is alive, and on this host, its
        process (assumption 7).

        A worker on another host counts as alive until its key expires; its executions
        expire sooner anyway, so this errs on the side of not touching a job.
        """
        if not name:
            return False
        data = self.redis.hgetall(Worker.redis_worker_namespace_prefix + name)
        if not data or b"death" in data:
            return False
        pid = int(data.get(b"pid") or 0)
        if as_text(data.get(b"hostname") or b"") != socket.gethostname() or not pid:
            return True
        return _process_running(pid)

    def run_of(self, job_id: str) -> str:
        """The run a job holds a slot for: the parked run a resume job continues, else the
        job's own id (assumption 2)."""
        return as_text(self.redis.hget(Job.key_for(job_id), RUN_FIELD) or job_id)

    def current_job(self, *, pid: int, host: str) -> Job | None:
        """One job the RQ worker with ``pid`` on ``host`` executes (see :meth:`current_jobs`)."""
        jobs = self.current_jobs(pid=pid, host=host)
        return jobs[0] if jobs else None

    def current_jobs(self, *, pid: int, host: str) -> list[Job]:
        """Every job the RQ worker with ``pid`` on ``host`` executes: its executions (one
        in the fork pool, up to its concurrency in the threads pool). The worker is matched,
        where Redis saw one, also by this client's address: containers may share a hostname
        and pids."""
        me = _ip(str(self.redis.client_info().get("addr", "")))
        for worker in Worker.all(connection=self.redis, serializer=JSONSerializer):
            if worker.pid != pid or worker.hostname != host:
                continue
            seen = _ip(worker.ip_address or "")
            if seen and me and seen != me:
                continue
            ids = [e.job_id for e in worker.get_current_executions(refresh=True)]
            return [job for job in Job.fetch_many(ids, connection=self.redis,
                                                  serializer=JSONSerializer) if job]  # fmt: skip
        return []

    # --- acting on it ----------------------------------------------------------------------

    def requeue_lost(self, job_id: str) -> bool:
        """Put a lost ``queued`` job back at the front of its queue; False if it moved
        meanwhile (assumption 8).

        The job keeps its concurrency slot (it never gave it up). Its stale executions go
        first, so rq's started-registry cleanup never fails the new run for the old one.
        """
        conn = self.redis
        job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
        queue = Queue(job.origin, connection=conn, serializer=JSONSerializer)
        stale = self._executions(job)
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

    def release_lane_slot(self, lane: str, job_id: str) -> None:
        """Free ``job_id``'s slot in the RQ lane ``lane`` and let the next through."""
        RateLimitRegistry(lane, self.redis).release_stale_and_enqueue(job_id)

    def abandon_jobs_of_dead_worker(self, jobs: list[Job], *, now: float) -> None:
        """The process executing ``jobs`` is dead: move their executions' heartbeat
        deadlines to the past and let RQ fail them now (:meth:`abandon_started`), rather
        than when the deadlines pass (assumption 6)."""
        if not jobs:
            return
        with self.redis.pipeline() as pipe:
            for job in jobs:
                for execution in self._executions(job):
                    pipe.zadd(job.started_job_registry.key, {execution.composite_key: 0}, xx=True)
            pipe.execute()
        for origin in sorted({job.origin for job in jobs}):
            self.abandon_started(origin, now=now)

    def abandon_started(self, origin: str, *, now: float) -> None:
        """Let RQ fail the ``started`` jobs of queue ``origin`` whose heartbeat deadline
        passed (``AbandonedJobError``), which frees their slots (assumption 6)."""
        registry = StartedJobRegistry(origin, connection=self.redis, serializer=JSONSerializer)
        registry.cleanup(timestamp=now)


def _process_running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return os.getpid() != pid  # exists, owned by someone else


def _ip(addr: str) -> str:
    """``10.0.0.5:6379`` -> ``10.0.0.5``; ``""`` when Redis could not say."""
    ip = addr.rpartition(":")[0]
    return "" if addr == "unknown" else ip
