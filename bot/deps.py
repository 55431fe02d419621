"""The typed bag of dependencies that jobs, tools and the gateway receive explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from bot.agent.llm import ChatModel
from bot.config import Settings
from bot.keys import Keys
from bot.store.history import HistoryStore
from bot.store.runs import RunsRegistry
from bot.store.transcripts import TranscriptStore

TURNS_QUEUE = "turns"
SUBAGENTS_QUEUE = "subagents"
SUBAGENT_SLOT_KEY = "subagents"


@dataclass(frozen=True, kw_only=True)
class Deps:
    """Everything a job or a tool needs, built once per process from settings."""

    settings: Settings
    redis: Redis
    keys: Keys
    runs: RunsRegistry
    history: HistoryStore
    transcripts: TranscriptStore
    model: ChatModel

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
            model=ChatModel(settings=settings.openai),
        )

    def queue(self, name: str) -> Queue:
        return Queue(name, connection=self.redis, serializer=JSONSerializer)

    def close(self) -> None:
        self.model.close()
        self.redis.close()


def connect(url: str) -> Redis:
    """A sync client with bounded timeouts and retry on connection errors."""
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    return Redis.from_url(
        url,
        socket_timeout=30,
        socket_connect_timeout=5,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=20),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
