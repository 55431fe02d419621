"""The RQ side of fanbot: queues, the job wire contract, and every call into RQ's API.

RQ is the executor, not the source of truth (the run hash is). What fanbot asks of RQ in
the everyday goes through :class:`Jobs`, using RQ's API: enqueue with a concurrency lane
(``RateLimit``), cancel, the stop command, job status, the started registry and the
rate-limit registries. Two things go beyond that API, and both are in
:mod:`bot.store.rq_layout`, with each assumption about RQ's keys they make: a subagent job
is saved *held* and enqueued by the fair line's Lua scripts (:mod:`bot.store.fair`), and
the maintenance repair reads and mends RQ's state after a worker died. Jobs are enqueued by
dotted name, so ``bot`` never imports ``workers``; payloads are JSON
(``JSONSerializer``), never pickles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal

from pydantic import BaseModel, Field
from redis import Redis
from rq import Callback, Queue
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimit, RateLimitRegistry
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.worker import Worker

from bot.keys import Keys
from bot.store.fair import FairQueue, line_order
from bot.store.rq_layout import HELD_STATUS

TURNS_QUEUE = "turns"
SUBAGENTS_QUEUE = "subagents"
TURN_JOB = "workers.jobs.run_turn"
RUN_JOB = "workers.jobs.run_subagent"
RESUME_JOB = "workers.jobs.resume_subagent"
RECOVER_JOB = "workers.jobs.recover_subagent"
RESULT_TTL = 3600
FAILURE_TTL = 86_400


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """One queue at one instant (for metrics).

    Attributes:
        name: The queue.
        depth: Jobs waiting on it for a free worker.
        executing: Jobs a worker is executing now.
        oldest_seconds: Age of the job at its head (0 when empty).
    """

    name: str
    depth: int
    executing: int
    oldest_seconds: float


class TurnJob(BaseModel):
    """What the gateway puts on the ``turns`` queue (the job wire contract)."""

    session_key: str
    thread: dict[str, Any]
    platform: str
    sender_id: str
    sender_name: str = ""
    text: str = Field(max_length=200_000)
    message_id: str
    agent_id: str = "main"
    is_dm: bool = False
    traceparent: str = ""
    """W3C trace context of the gateway's ingress span ("" when tracing is off)."""
    kind: Literal["message", "join"] = "message"
    """``join``: the main agent's continuation after a fan-in (:mod:`bot.runs.join`)."""
    join_id: str = ""
    chain: int = Field(0, ge=0)
    """How many continuation rounds led to this turn since the user's message (0: it is
    the user's message)."""
    attempt: int = Field(1, ge=1)
    """Which attempt at the turn this job is: 1, or more when earlier attempts lost their
    worker (:mod:`bot.store.turn_attempts`; absent from older payloads: 1)."""
    approval_id: str = ""
    """Set on a turn that parked for a tool call's approval and now resumes: the decided
    approval (docs/architecture.md, "Approvals: one gate")."""

    @property
    def reply_key(self) -> str:
        return f"reply:{self.platform}:{self.thread.get('chat')}:{self.message_id}"


@dataclass(frozen=True, kw_only=True)
class QueueOverview:
    """One queue as the ops page shows it.

    Attributes:
        name: The queue.
        queued: Jobs waiting for a worker.
        waiting_slot: Jobs waiting for a concurrency slot (the subagent lane only).
        started: Jobs in RQ's started registry (executing, or not yet cleaned up).
        failed: Jobs in RQ's failed registry.
    """

    name: str
    queued: int
    waiting_slot: int
    started: int
    failed: int


_ENDED = frozenset({JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED})


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    """One RQ worker as registered in Redis.

    Attributes:
        name: RQ's worker name.
        state: ``idle``, ``busy``, ``suspended``...
        queues: The queues it listens on.
        current_job: The job it executes ("" when none).
        last_heartbeat: Unix time of its last heartbeat (None if never).
        host: Hostname and pid.
    """

    name: str
    state: str
    queues: tuple[str, ...]
    current_job: str
    last_heartbeat: float | None
    host: str


@dataclass(frozen=True, kw_only=True)
class RunJobSpec:
    """How to enqueue one subagent run.

    Attributes:
        run_id: The run; also its job id.
        timeout: RQ's hard limit in seconds (-1: none, a run without a deadline).
        max_concurrent: Size of the subagent lane.
        description: Shown by ``rq info``.
        session_key: The session whose line it waits in (:mod:`bot.store.fair`).
        per_session: Slots one session may hold at most (None: no cap).
    """

    run_id: str
    timeout: int
    max_concurrent: int
    description: str
    session_key: str = ""
    per_session: int | None = None


class TurnJobIds:
    """Turn job ids that sort by creation time (RQ's rate-limit lane scores whole seconds
    and breaks ties by id, so this keeps a session's turns in order). Within one maker the
    millisecond part strictly increases, so two messages in one millisecond keep theirs; the
    gateway's ingress holds the one maker of its process."""

    def __init__(self) -> None:
        self._last_ms = 0
        self._lock = threading.Lock()

    def new(self, token: str, *, now: float | None = None) -> str:
        """A new id for the turn job of the message whose claim token is ``token``."""
        ms = int((time.time() if now is None else now) * 1000)
        if now is None:
            with self._lock:
                ms = self._last_ms = max(ms, self._last_ms + 1)
        return f"turn-{ms:013d}-{token[:12]}"


def turn_lane(session_key: str) -> str:
    """The ``RateLimit`` key that keeps one turn at a time per session."""
    return f"turn:{session_key}"


class Jobs:
    """Every call fanbot makes into RQ.

    Args:
        redis: Sync client (``decode_responses`` off, as RQ needs).
        keys: Key builder (for the fair line of the subagent slots).
        per_session: The per-session cap, for the projected line (None: no cap).
    """

    def __init__(
        self, *, redis: Redis, keys: Keys | None = None, per_session: int | None = None
    ) -> None:
        self.redis = redis
        self.per_session = per_session
        self.fair = FairQueue(redis=redis, keys=keys or Keys(), queue=self.queue(SUBAGENTS_QUEUE))

    def queue(self, name: str) -> Queue:
        return Queue(name, connection=self.redis, serializer=JSONSerializer)

    def enqueue_turn(self, job: TurnJob, *, job_id: str, timeout: int) -> str:
        """Queue a main-agent turn behind the session's earlier ones; returns the job id."""
        enqueued = self.queue(TURNS_QUEUE).enqueue(
            TURN_JOB,
            job.model_dump(mode="json"),
            job_id=job_id,
            rate_limit=RateLimit(turn_lane(job.session_key), 1),
            on_stopped=Callback("workers.callbacks.turn_stopped"),
            job_timeout=timeout,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
        )
        return str(enqueued.id)

    def enqueue_run(self, spec: RunJobSpec) -> list[str]:
        """Create a recorded run's job, held, in its session's line for a subagent slot
        (:mod:`bot.store.fair`), and admit what fits; returns the run ids admitted."""
        return self._submit_held(spec, RUN_JOB, (spec.run_id,), job_id=spec.run_id)

    def enqueue_resume(
        self, spec: RunJobSpec, *, job_id: str, join_id: str = "", approval_id: str = ""
    ) -> list[str]:
        """Resume a parked run (its children ended, or a person decided its approval): the
        job ``job_id`` waits in the run's session line for a subagent slot like a new run
        (:mod:`bot.store.fair`); returns the run ids admitted."""
        extra = (approval_id,) if approval_id else ()
        args = (spec.run_id, join_id, *extra)
        return self._submit_held(spec, RESUME_JOB, args, job_id=job_id, resumes=spec.run_id)

    def recovery_job(self, spec: RunJobSpec, *, attempt: int) -> Job:
        """The job of attempt ``attempt`` at a run whose worker was lost, created but not
        saved: the recovery script (:mod:`bot.store.recovery`) saves and queues it if it
        decides to resume the run. The run keeps its slot, so it waits in no line."""
        return self.queue(SUBAGENTS_QUEUE).create_job(
            RECOVER_JOB,
            args=(spec.run_id,),
            job_id=f"{spec.run_id}-a{attempt}",
            timeout=spec.timeout,
            on_failure=Callback("workers.callbacks.subagent_failed"),
            on_stopped=Callback("workers.callbacks.subagent_stopped"),
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            description=spec.description,
        )

    def _submit_held(
        self,
        spec: RunJobSpec,
        func: str,
        args: tuple[str, ...],
        *,
        job_id: str,
        resumes: str = "",
    ) -> list[str]:
        """A subagent job created held (no queue) and put in its session's fair line."""
        queue = self.queue(SUBAGENTS_QUEUE)
        job = queue.create_job(
            func,
            args=args,
            job_id=job_id,
            timeout=spec.timeout,
            on_failure=Callback("workers.callbacks.subagent_failed"),
            on_stopped=Callback("workers.callbacks.subagent_stopped"),
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            description=spec.description,
            status=JobStatus(HELD_STATUS),
        )
        job.origin = queue.name
        return self.fair.submit(
            job,
            session_key=spec.session_key,
            max_concurrent=spec.max_concurrent,
            cap=spec.per_session,
            resumes=resumes,
        )

    def exists(self, job_id: str) -> bool:
        return bool(Job.exists(job_id, connection=self.redis))

    def fetch(self, job_id: str) -> Job | None:
        try:
            return Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return None

    def status(self, job_id: str) -> JobStatus | None:
        """The job's status as RQ last wrote it; None when the job is gone."""
        job = self.fetch(job_id)
        if job is None:
            return None
        return job.get_status(refresh=False) or JobStatus.QUEUED

    def cancel_queued(self, job_id: str) -> bool:
        """Cancel a job that has not started; True if it is already executing instead.

        A run still waiting for a slot leaves its line; one holding a slot keeps it until
        its ``finalize``, whose caller admits the next run.
        """
        job = self.fetch(job_id)
        if job is None:
            return False
        status = job.get_status(refresh=False)
        if status is JobStatus.STARTED:
            return True
        if status in _ENDED:  # nothing to cancel (an old resume job of a run, say)
            return False
        try:
            job.cancel()
        except InvalidJobOperation:  # canceled already, e.g. by an earlier stop
            return False
        finally:
            self.fair.withdraw(job_id)
        return False

    def send_stop(self, job_id: str) -> bool:
        """Ask the worker executing ``job_id`` to kill its horse; False if nobody executes it."""
        try:
            send_stop_job_command(self.redis, job_id, serializer=JSONSerializer)
        except (NoSuchJobError, InvalidJobOperation):
            return False
        return True

    def is_executing(self, job_id: str) -> bool:
        job = self.fetch(job_id)
        return job is not None and job.get_status() is JobStatus.STARTED and bool(job.worker_name)

    def started_turns(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(job_id, payload)`` of every turn a worker is executing now."""
        registry = StartedJobRegistry(TURNS_QUEUE, connection=self.redis, serializer=JSONSerializer)
        for job_id in registry.get_job_ids():
            job = self.fetch(job_id)
            if job is not None:
                payload = job.args[0] if job.args and isinstance(job.args[0], dict) else {}
                yield job_id, payload

    def current_run_id(self, job: Job) -> str | None:
        """The run a worker's current job executes, if it is a subagent run."""
        if job.func_name not in (RUN_JOB, RESUME_JOB, RECOVER_JOB) or not job.args:
            return None
        return str(job.args[0])

    def subagent_slot_key(self) -> str:
        """The sorted set of runs holding a subagent slot (released by ``finalize``)."""
        return self.fair.slots_key

    def refill_subagent_slots(
        self, max_concurrent: int, per_session: int | None = None
    ) -> list[str]:
        """Give free subagent slots to waiting runs, fairly; returns the run ids admitted."""
        return self.fair.admit(max_concurrent=max_concurrent, cap=per_session)

    def subagent_line(self) -> list[str]:
        """Job ids of the runs waiting to start, in the order they will start: those on the
        ``subagents`` queue (waiting for a free worker), then those waiting for a slot in
        the fair order (:func:`bot.store.fair.line_order`)."""
        line = self.fair.line()
        return [*line.admitted, *line_order(line, self.per_session)]

    def turns_in_flight(self, session_key: str) -> int:
        """Turns of ``session_key`` executing or waiting for their lane."""
        lane = RateLimitRegistry(turn_lane(session_key), connection=self.redis)
        return int(lane.get_allowed_job_count()) + int(lane.get_rate_limited_job_count())

    def queue_stats(
        self, names: tuple[str, ...] = (TURNS_QUEUE, SUBAGENTS_QUEUE)
    ) -> list[QueueStats]:
        """Depth, jobs executing and the head's age of each queue in ``names``."""
        stats = []
        for name in names:
            queue = self.queue(name)
            head = queue.get_job_ids(0, 1)
            job = self.fetch(head[0]) if head else None
            created = job.enqueued_at or job.created_at if job is not None else None
            age = 0.0 if created is None else max(0.0, time.time() - created.timestamp())
            started = StartedJobRegistry(name, connection=self.redis, serializer=JSONSerializer)
            stats.append(
                QueueStats(
                    name=name,
                    depth=queue.count,
                    executing=started.get_job_count(cleanup=False),
                    oldest_seconds=age,
                )
            )
        return stats

    def waiting_for_slot(self) -> int:
        """Subagent runs waiting for a slot."""
        return self.fair.waiting_count()

    def worker_pids(self, hostname: str) -> set[int]:
        """PIDs of the RQ workers registered from ``hostname`` (alive, listening)."""
        workers = Worker.all(connection=self.redis, serializer=JSONSerializer)
        return {w.pid for w in workers if w.pid is not None and w.hostname == hostname}

    def worker_count(self) -> int:
        """RQ workers registered in this Redis, on every host."""
        return int(Worker.count(connection=self.redis))

    def queue_overview(self) -> list[QueueOverview]:
        """Lengths of the ``turns`` and ``subagents`` queues and their registries."""
        waiting_slot = self.fair.waiting_count()
        stats = []
        for name in (TURNS_QUEUE, SUBAGENTS_QUEUE):
            queue = self.queue(name)
            stats.append(
                QueueOverview(
                    name=name,
                    queued=int(queue.count),
                    waiting_slot=waiting_slot if name == SUBAGENTS_QUEUE else 0,
                    # cleanup=False: a page view must not move RQ's jobs around
                    started=int(queue.started_job_registry.get_job_count(cleanup=False)),
                    failed=int(queue.failed_job_registry.get_job_count(cleanup=False)),
                )
            )
        return stats

    def workers(self) -> list[WorkerInfo]:
        """Every RQ worker registered in Redis, by name."""
        found = Worker.all(connection=self.redis, serializer=JSONSerializer)
        return sorted((_worker_info(w) for w in found), key=lambda w: w.name)


def _worker_info(worker: Any) -> WorkerInfo:
    beat = worker.last_heartbeat
    if beat is not None and beat.tzinfo is None:
        beat = beat.replace(tzinfo=UTC)  # RQ stores UTC without saying so
    return WorkerInfo(
        name=str(worker.name),
        state=str(worker.get_state()),
        queues=tuple(worker.queue_names()),
        current_job=str(worker.get_current_job_id() or ""),
        last_heartbeat=beat.timestamp() if beat is not None else None,
        host=f"{worker.hostname or '?'}:{worker.pid or '?'}",
    )
