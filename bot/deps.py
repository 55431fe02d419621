"""The typed bag of stores that jobs, tools, commands and the gateway receive explicitly.

It holds the stores only: the model client travels separately (a backup finalizer or a
chat command must not build an OpenAI client to write a Redis hash).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from bot.config import Settings
from bot.keys import Keys
from bot.redis.connect import connect
from bot.store.approvals import Approvals
from bot.store.budgets import Budgets
from bot.store.dedupe import Dedupe
from bot.store.history import HistoryStore
from bot.store.jobs import Jobs
from bot.store.joins import Joins
from bot.store.leases import Leases
from bot.store.runs import RunsRegistry
from bot.store.stops import Stops
from bot.store.transcripts import TranscriptStore
from bot.store.workspace import Limits, Workspace


@dataclass(frozen=True, kw_only=True)
class Deps:
    """Settings and every Redis owner, built once per process from settings."""

    settings: Settings
    redis: Redis
    keys: Keys
    runs: RunsRegistry
    history: HistoryStore
    transcripts: TranscriptStore
    jobs: Jobs
    stops: Stops
    dedupe: Dedupe
    leases: Leases
    workspace: Workspace
    joins: Joins
    budgets: Budgets
    approvals: Approvals

    @classmethod
    def build(cls, settings: Settings, *, client: Redis | None = None) -> Deps:
        client = client or connect(settings.redis_url)
        keys = Keys(prefix=settings.key_prefix)
        return cls(
            settings=settings,
            redis=client,
            keys=keys,
            runs=RunsRegistry(redis=client, keys=keys, history_max=settings.history.max_messages),
            history=HistoryStore(
                redis=client,
                keys=keys,
                max_messages=settings.history.max_messages,
                max_chars=settings.history.max_message_chars,
            ),
            transcripts=TranscriptStore(redis=client, keys=keys),
            jobs=Jobs(
                redis=client, keys=keys, per_session=settings.subagents.max_concurrent_per_session
            ),
            stops=Stops(redis=client, keys=keys),
            dedupe=Dedupe(redis=client, keys=keys),
            leases=Leases(redis=client, keys=keys),
            workspace=Workspace(redis=client, keys=keys, limits=_workspace_limits(settings)),
            joins=Joins(redis=client, keys=keys),
            budgets=Budgets(
                redis=client, keys=keys, ttl_seconds=settings.subagents.retention_days * 86_400
            ),
            approvals=Approvals(redis=client, keys=keys),
        )

    def close(self) -> None:
        self.redis.close()


def _workspace_limits(settings: Settings) -> Limits:
    ws = settings.workspace
    return Limits(
        max_file_bytes=ws.max_file_bytes,
        max_bytes=ws.max_bytes,
        max_files=ws.max_files,
        ttl_seconds=settings.subagents.retention_days * 86_400,
    )
