"""Bounded chat history of a requester session (a Redis list of JSON messages).

Bounded both ways: at most ``max_messages`` entries, each entry's content at most
``max_chars`` characters (cut with a note), so loading a session's history has a fixed cost.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from bot.keys import Keys
from bot.store.owner import RedisOwner
from bot.text.clip import clip

Message = dict[str, Any]


class HistoryStore(RedisOwner):
    """Append and read a session's recent messages.

    Args:
        redis: Sync client.
        keys: Key builder.
        max_messages: Older messages are trimmed away beyond this many.
        max_chars: A single message's content is cut to this length, with a note.
    """

    def __init__(
        self, *, redis: redis.Redis, keys: Keys, max_messages: int = 60, max_chars: int = 16_000
    ) -> None:
        super().__init__(redis=redis, keys=keys)
        self.max_messages = max_messages
        self.max_chars = max_chars

    def append(
        self, session_key: str, *messages: Message, pipe: redis.client.Pipeline | None = None
    ) -> None:
        """Append messages; with ``pipe`` the writes join the caller's transaction."""
        if not messages:
            return
        key = self.keys.history(session_key)
        if pipe is not None:
            pipe.rpush(key, *(json.dumps(self._bounded(m)) for m in messages))
            pipe.ltrim(key, -self.max_messages, -1)
            return
        with self.redis.pipeline() as own:
            self.append(session_key, *messages, pipe=own)
            own.execute()

    def load(self, session_key: str, limit: int | None = None) -> list[Message]:
        n = min(limit or self.max_messages, self.max_messages)
        raw = self.redis.lrange(self.keys.history(session_key), -n, -1)
        return [json.loads(item) for item in raw]

    def exists(self, session_key: str) -> bool:
        return bool(self.redis.exists(self.keys.history(session_key)))

    def _bounded(self, message: Message) -> Message:
        content = message.get("content")
        if isinstance(content, str) and len(content) > self.max_chars:
            return {**message, "content": clip(content, self.max_chars)}
        return message
