"""The typed bag of stores that jobs, tools, commands and the gateway receive explicitly.

It holds the stores only: the model client travels separately (a backup finalizer or a
chat command must not build an OpenAI client to write a Redis hash). Every owner of a
Redis structure is built here once per process; code outside :mod:`bot.store` reaches
Redis through these owners only (``deps.outbox.put(message)``), and ``deps.connection``
for what belongs to no one structure (a PING, a batch of several owners' writes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from redis import Redis
from redis.exceptions import RedisError

from bot.config import Settings
from bot.failpoints import Failpoints
from bot.keys import Keys
from bot.redis.connect import Connection, connect
from bot.store.approvals import Approvals
from bot.store.budgets import Budgets
from bot.store.dead_letters import DeadLetters
from bot.store.dedupe import Dedupe
from bot.store.estimates import Estimates
from bot.store.history import HistoryStore
from bot.store.jobs import Jobs
from bot.store.joins import Joins
from bot.store.leases import Leases
from bot.store.lost_jobs import LostJobs
from bot.store.metrics import MetricsStore
from bot.store.model_limits import ModelLimits
from bot.store.outbox import OutboxWriter
from bot.store.progress import ProgressWriter
from bot.store.receipts import Receipts
from bot.store.recovery import RunRecovery
from bot.store.rq_layout import RqLayout
from bot.store.runs import RunsRegistry
from bot.store.schedules import ScheduleStore
from bot.store.session_ttl import SessionSweep
from bot.store.stops import Stops
from bot.store.summaries import SummaryStore
from bot.store.thread_models import ThreadModels
from bot.store.threads import ThreadBindings
from bot.store.transcripts import TranscriptStore
from bot.store.turn_attempts import TurnAttempts
from bot.store.usage import Usage
from bot.store.workspace import Limits, Workspace

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Deps:
    """Settings and every Redis owner, built once per process from settings.

    ``redis`` is the client the owners share; production code outside :mod:`bot.store`
    does not use it (tests do, to look under the owners).
    """

    settings: Settings
    redis: Redis
    keys: Keys
    connection: Connection
    runs: RunsRegistry
    recovery: RunRecovery
    turn_attempts: TurnAttempts
    history: HistoryStore
    summaries: SummaryStore
    thread_models: ThreadModels
    session_sweep: SessionSweep
    transcripts: TranscriptStore
    jobs: Jobs
    rq: RqLayout
    stops: Stops
    dedupe: Dedupe
    leases: Leases
    workspace: Workspace
    joins: Joins
    budgets: Budgets
    approvals: Approvals
    outbox: OutboxWriter
    progress: ProgressWriter
    thread_bindings: ThreadBindings
    receipts: Receipts
    schedules: ScheduleStore
    dead_letters: DeadLetters
    lost_jobs: LostJobs
    metrics: MetricsStore
    model_limits: ModelLimits
    estimates: Estimates
    usage: Usage
    failpoints: Failpoints = field(default_factory=Failpoints)
    """Where a fault test makes this process die (``FANBOT_FAILPOINTS``; none by default)."""

    @classmethod
    def build(cls, settings: Settings, *, client: Redis | None = None) -> Deps:
        client = client or connect(settings.redis_url)
        keys = Keys(prefix=settings.key_prefix)
        retention = int(settings.subagents.retention_days * 86_400)
        metrics = MetricsStore(redis=client, keys=keys)
        return cls(
            settings=settings,
            redis=client,
            keys=keys,
            connection=Connection(redis=client),
            runs=RunsRegistry(
                redis=client,
                keys=keys,
                history_max=settings.history.max_messages,
                metrics=metrics,
                session_ttl=settings.sessions.ttl_seconds,
            ),
            recovery=RunRecovery(redis=client, keys=keys),
            turn_attempts=TurnAttempts(
                redis=client, keys=keys, ttl_seconds=settings.turn_timeout_seconds + 3600
            ),
            history=HistoryStore(
                redis=client,
                keys=keys,
                max_messages=settings.history.max_messages,
                max_chars=settings.history.max_message_chars,
                ttl=settings.sessions.ttl_seconds,
            ),
            summaries=SummaryStore(redis=client, keys=keys, ttl=settings.sessions.ttl_seconds),
            thread_models=ThreadModels(redis=client, keys=keys, ttl=settings.sessions.ttl_seconds),
            session_sweep=SessionSweep(redis=client, keys=keys, ttl=settings.sessions.ttl_seconds),
            transcripts=TranscriptStore(redis=client, keys=keys),
            jobs=Jobs(
                redis=client, keys=keys, per_session=settings.subagents.max_concurrent_per_session
            ),
            rq=RqLayout(redis=client),
            stops=Stops(redis=client, keys=keys),
            dedupe=Dedupe(redis=client, keys=keys),
            leases=Leases(redis=client, keys=keys),
            workspace=Workspace(redis=client, keys=keys, limits=_workspace_limits(settings)),
            joins=Joins(redis=client, keys=keys),
            budgets=Budgets(redis=client, keys=keys, ttl_seconds=retention),
            approvals=Approvals(redis=client, keys=keys),
            outbox=OutboxWriter(redis=client, keys=keys),
            progress=ProgressWriter(redis=client, keys=keys),
            thread_bindings=ThreadBindings(redis=client, keys=keys, ttl=retention),
            receipts=Receipts(redis=client, keys=keys),
            schedules=ScheduleStore(redis=client, keys=keys),
            dead_letters=DeadLetters(redis=client, keys=keys),
            lost_jobs=LostJobs(redis=client, keys=keys),
            metrics=metrics,
            model_limits=ModelLimits(redis=client, keys=keys),
            estimates=Estimates(redis=client, keys=keys),
            usage=Usage(redis=client, keys=keys),
            failpoints=Failpoints.from_env(),
        )

    def close(self) -> None:
        """Write the metric updates this process kept (best effort), then disconnect."""
        try:
            self.metrics.flush()
        except (RedisError, OSError) as exc:
            log.debug("metrics not written at close: %s", exc)
        self.connection.close()


def _workspace_limits(settings: Settings) -> Limits:
    ws = settings.workspace
    return Limits(
        max_file_bytes=ws.max_file_bytes,
        max_bytes=ws.max_bytes,
        max_files=ws.max_files,
        ttl_seconds=settings.subagents.retention_days * 86_400,
    )
