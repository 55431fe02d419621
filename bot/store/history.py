"""Bounded chat history of a requester session (a Redis list of JSON messages).

Bounded both ways: at most ``max_messages`` entries, each entry's content at most
``max_chars`` characters (cut with a note), so loading a session's history has a fixed cost.
And bounded in time: each append sets the session's TTL again (:mod:`bot.store.session_ttl`).
"""

from __future__ import annotations

import json
from typing import Any

import redis

from bot.keys import Keys, glob_escape
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import RedisOwner
from bot.store.session_ttl import DEFAULT_TTL, refresh
from bot.text.clip import clip

Message = dict[str, Any]

_APPEND_HISTORY = """
local function append_history(k, a)
  if a[1] ~= '' then
    redis.call('RPUSH', k[1], a[1])
    redis.call('LTRIM', k[1], -tonumber(a[2]), -1)
    redis.call('EXPIRE', k[1], a[3])
  end
end
"""
APPEND_HISTORY = Fragment(name="append_history", lua=_APPEND_HISTORY, keys=1, args=3)
"""Appending one message as a piece of a script spanning owners (``a``: the JSON message or
``""``, how many messages the session keeps, its TTL); see :mod:`bot.store.lua_parts`."""


def append_history_part(
    keys: Keys, session_key: str, message: Message | None, *, max_messages: int, ttl: int
) -> Part:
    """:data:`APPEND_HISTORY`'s part for appending ``message`` (None: nothing); ``ttl``:
    the session's retention in seconds."""
    data = json.dumps(message) if message else ""
    return Part(
        fragment=APPEND_HISTORY,
        keys=(keys.history(session_key),),
        args=(data, max_messages, ttl),
    )


class HistoryStore(RedisOwner):
    """Append and read a session's recent messages.

    Args:
        redis: Sync client.
        keys: Key builder.
        max_messages: Older messages are trimmed away beyond this many.
        max_chars: A single message's content is cut to this length, with a note.
        ttl: Seconds the session lives after its last write (``FANBOT_SESSIONS__RETENTION_DAYS``).
    """

    def __init__(
        self,
        *,
        redis: redis.Redis,
        keys: Keys,
        max_messages: int = 60,
        max_chars: int = 16_000,
        ttl: int = DEFAULT_TTL,
    ) -> None:
        super().__init__(redis=redis, keys=keys)
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.ttl = ttl

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
            refresh(pipe, self.keys, session_key, self.ttl)
            return
        with self.redis.pipeline() as own:
            self.append(session_key, *messages, pipe=own)
            own.execute()

    def load(self, session_key: str, limit: int | None = None) -> list[Message]:
        n = min(limit or self.max_messages, self.max_messages)
        raw = self.redis.lrange(self.keys.history(session_key), -n, -1)
        return [json.loads(item) for item in raw]

    def clear(self, session_key: str) -> int:
        """Forget the session's messages and its summary (``/new``); returns how many
        messages there were."""
        key = self.keys.history(session_key)
        with self.redis.pipeline() as pipe:
            pipe.llen(key)
            pipe.delete(key, self.keys.session_summary(session_key))
            count, _ = pipe.execute()
        return int(count)

    def exists(self, session_key: str) -> bool:
        return bool(self.redis.exists(self.keys.history(session_key)))

    def sessions_under(self, prefix: str, *, limit: int = 200) -> dict[str, tuple[int, int]]:
        """Session keys starting with ``prefix`` that have a history: their messages and
        the runs numbered in them (the session's run counter), at most ``limit`` sessions.
        A SCAN with a match, for a small keyspace (the console's ``:threads``)."""
        head, _, tail = self.keys.history("\0").partition("\0")
        pattern = glob_escape(head + prefix) + "*" + glob_escape(tail)
        found: list[str] = []
        for key in self.redis.scan_iter(match=pattern, count=500):
            name = as_text(key)
            if name.startswith(head + prefix) and name.endswith(tail):
                found.append(name[len(head) : len(name) - len(tail)])
            if len(found) >= limit:
                break
        with self.redis.pipeline(transaction=False) as pipe:
            for session_key in found:
                pipe.llen(self.keys.history(session_key))
                pipe.get(self.keys.session_seq(session_key))
            raw = pipe.execute()
        return {key: (int(raw[2 * i]), int(raw[2 * i + 1] or 0)) for i, key in enumerate(found)}

    def _bounded(self, message: Message) -> Message:
        content = message.get("content")
        if isinstance(content, str) and len(content) > self.max_chars:
            return {**message, "content": clip(content, self.max_chars)}
        return message
