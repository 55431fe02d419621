"""A thread's own model, chosen with ``/model <name>`` (a Redis string beside its history).

The main agent's turns in the thread use it instead of the agent's model
(:func:`bot.models.catalog.main_model`). It lives as long as the session: written with the
session's retention and refreshed with the session's other keys
(:mod:`bot.store.session_ttl`). ``/new`` keeps it: it belongs to the thread, not to the
conversation (docs/chat-commands.md).
"""

from __future__ import annotations

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.owner import RedisOwner
from bot.store.session_ttl import DEFAULT_TTL, refresh

MAX_MODEL_CHARS = 200
"""The longest model name kept (``/model`` refuses longer ones before this)."""


class ThreadModels(RedisOwner):
    """Read, set and clear the model of a requester session.

    Args:
        redis: Sync client.
        keys: Key builder.
        ttl: Seconds the session lives after its last write.
    """

    def __init__(self, *, redis: redis.Redis, keys: Keys, ttl: int = DEFAULT_TTL) -> None:
        super().__init__(redis=redis, keys=keys)
        self.ttl = ttl

    def get(self, session_key: str) -> str | None:
        raw = self.redis.get(self.keys.session_model(session_key))
        return as_text(raw) or None if raw is not None else None

    def set(self, session_key: str, model: str) -> None:
        """Keep ``model`` as the thread's (a write: every key of the session is refreshed)."""
        with self.redis.pipeline() as pipe:
            pipe.set(self.keys.session_model(session_key), model[:MAX_MODEL_CHARS])
            refresh(pipe, self.keys, session_key, self.ttl)
            pipe.execute()

    def clear(self, session_key: str) -> bool:
        """Back to the agent's model; False when the thread had none of its own."""
        return bool(self.redis.delete(self.keys.session_model(session_key)))
