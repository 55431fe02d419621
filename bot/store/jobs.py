"""The RQ side of fanbot: queues, the job wire contract, and every call into RQ's API.

RQ is the executor, not the source of truth (the run hash is). Everything fanbot asks of RQ
goes through :class:`Jobs`, using RQ's public API only: enqueue with a concurrency lane
(``RateLimit``), cancel, the stop command, job status, the started registry and the
rate-limit registries. Jobs are enqueued by dotted name, so ``bot`` never imports
``workers``; payloads are JSON (``JSONSerializer``), never pickles.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from redis import Redis
from rq import Callback, Queue
from rq.command import send_stop_job_command
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimit, RateLimitRegistry
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

TURNS_QUEUE = "turns"
SUBAGENTS_QUEUE = "subagents"
SUBAGENT_SLOT_KEY = "subagents"
"""The ``RateLimit`` key of the subagent concurrency lane."""
TURN_JOB = "workers.jobs.run_turn"
RUN_JOB = "workers.jobs.run_subagent"
RESULT_TTL = 3600
FAILURE_TTL = 86_400


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

    @property
    def reply_key(self) -> str:
        return f"reply:{self.platform}:{self.thread.get('chat')}:{self.message_id}"


@dataclass(frozen=True, kw_only=True)
class RunJobSpec:
    """How to enqueue one subagent run.

    Attributes:
        run_id: The run; also its job id.
        timeout: RQ's hard limit in seconds.
        max_concurrent: Size of the subagent lane.
        description: Shown by ``rq info``.
    """

    run_id: str
    timeout: int
    max_concurrent: int
    description: str


def new_turn_job_id(token: str, *, now: float | None = None) -> str:
    """A turn job id that sorts by creation time (RQ's rate-limit lane scores whole seconds
    and breaks ties by id, so this keeps a session's turns in order)."""
    ms = int((time.time() if now is None else now) * 1000)
    return f"turn-{ms:013d}-{token[:12]}"


def turn_lane(session_key: str) -> str:
    """The ``RateLimit`` key that keeps one turn at a time per session."""
    return f"turn:{session_key}"


class Jobs:
    """Every call fanbot makes into RQ.

    Args:
        redis: Sync client (``decode_responses`` off, as RQ needs).
    """

    def __init__(self, *, redis: Redis) -> None:
        self.redis = redis

    def queue(self, name: str) -> Queue:
        return Queue(name, connection=self.redis, serializer=JSONSerializer)

    def enqueue_turn(self, job: TurnJob, *, job_id: str, timeout: int) -> str:
        """Queue a main-agent turn behind the session's earlier ones; returns the job id."""
        enqueued = self.queue(TURNS_QUEUE).enqueue(
            TURN_JOB,
            job.model_dump(mode="json"),
            job_id=job_id,
            rate_limit=RateLimit(turn_lane(job.session_key), 1),
            job_timeout=timeout,
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
        )
        return str(enqueued.id)

    def enqueue_run(self, spec: RunJobSpec) -> None:
        """Put a recorded run on the ``subagents`` queue under the concurrency limit."""
        self.queue(SUBAGENTS_QUEUE).enqueue(
            RUN_JOB,
            spec.run_id,
            job_id=spec.run_id,
            job_timeout=spec.timeout,
            rate_limit=RateLimit(SUBAGENT_SLOT_KEY, spec.max_concurrent),
            on_failure=Callback("workers.callbacks.subagent_failed"),
            on_stopped=Callback("workers.callbacks.subagent_stopped"),
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
            description=spec.description,
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

        ``Job.cancel`` also hands its concurrency slot to the next waiting job.
        """
        job = self.fetch(job_id)
        if job is None:
            return False
        if job.get_status(refresh=False) is JobStatus.STARTED:
            return True
        try:
            job.cancel()
        except InvalidJobOperation:  # canceled already, e.g. by an earlier stop
            return False
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
        if job.func_name != RUN_JOB or not job.args:
            return None
        return str(job.args[0])

    def subagent_slot_key(self) -> str:
        """RQ's sorted set of jobs holding a subagent slot (released by ``finalize``)."""
        return RateLimitRegistry(SUBAGENT_SLOT_KEY, connection=self.redis).allowed_key

    def refill_subagent_slots(self, max_concurrent: int) -> None:
        """Let waiting runs take slots that dead jobs freed, now rather than in minutes."""
        RateLimitRegistry(SUBAGENT_SLOT_KEY, connection=self.redis).acquire_and_enqueue(
            max_concurrent
        )

    def subagent_line(self) -> list[str]:
        """Job ids of the runs waiting to start, in the order they will start: those on the
        ``subagents`` queue (waiting for a free worker), then those waiting for a slot."""
        waiting = RateLimitRegistry(SUBAGENT_SLOT_KEY, connection=self.redis)
        return [*self.queue(SUBAGENTS_QUEUE).job_ids, *waiting.get_rate_limited_job_ids()]

    def turns_in_flight(self, session_key: str) -> int:
        """Turns of ``session_key`` executing or waiting for their lane."""
        lane = RateLimitRegistry(turn_lane(session_key), connection=self.redis)
        return int(lane.get_allowed_job_count()) + int(lane.get_rate_limited_job_count())
