"""A run's transcript: every message of its context, in order (a Redis list of JSON).

Each message's content is kept up to ``max_chars`` (cut with a note), and so are the
arguments of its tool calls: one runaway message cannot make a transcript unreadable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from bot.keys import Keys, glob_escape
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.text.clip import clip

_BEGIN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('LRANGE', KEYS[1], 0, -1)
end
redis.call('RPUSH', KEYS[1], unpack(ARGV))
return {}
"""


def bounded(message: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """``message`` with its content and each tool call's arguments cut to ``max_chars``
    (with a note), so one runaway message cannot make a recorded context unreadable
    (pure; a run's transcript and a turn's step record both keep messages so)."""
    entry = dict(message)
    content = entry.get("content")
    if isinstance(content, str) and len(content) > max_chars:
        entry["content"] = clip(content, max_chars)
    calls = entry.get("tool_calls")
    if isinstance(calls, list):
        entry["tool_calls"] = [_bounded_call(c, max_chars) for c in calls]
    return entry


def _bounded_call(call: Any, max_chars: int) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call
    arguments = function.get("arguments")
    if not isinstance(arguments, str) or len(arguments) <= max_chars:
        return call
    return {**call, "function": {**function, "arguments": clip(arguments, max_chars)}}


class TranscriptStore(RedisOwner):
    """Append to and read transcripts; archive renames them with a ``.deleted.<ts>`` suffix."""

    _begin = Lua(_BEGIN)

    def __init__(self, *, redis: redis.Redis, keys: Keys, max_chars: int = 100_000) -> None:
        super().__init__(redis=redis, keys=keys)
        self.max_chars = max_chars

    def begin(self, session_id: str, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start a new transcript with ``messages``, or return the one there already (a
        follow-up continues it; nothing is written then), in one round trip."""
        if not messages:
            return self.read(session_id)
        entries = [json.dumps(self._entry(m)) for m in messages]
        raw = self._begin(keys=[self.keys.transcript(session_id)], args=entries)
        return [json.loads(item) for item in raw]

    def append(self, session_id: str, message: dict[str, Any]) -> None:
        self.extend(session_id, [message])

    def extend(
        self, session_id: str, messages: Sequence[dict[str, Any]], *, pipe: Any = None
    ) -> None:
        """Append ``messages`` in order, in one round trip (``pipe``: queued on it)."""
        if messages:
            entries = [json.dumps(self._entry(m)) for m in messages]
            (pipe or self.redis).rpush(self.keys.transcript(session_id), *entries)

    def _entry(self, message: dict[str, Any]) -> dict[str, Any]:
        return {**bounded(message, self.max_chars), "ts": round(time.time(), 3)}

    def context(self, session_id: str) -> list[dict[str, Any]]:
        """The transcript as the model's context again: each message as it was sent,
        without the time it was recorded (a parked or recovered run goes on with it)."""
        return [{k: v for k, v in m.items() if k != "ts"} for m in self.read(session_id)]

    def read(self, session_id: str, *, last: int | None = None) -> list[dict[str, Any]]:
        start = -last if last else 0
        raw = self.redis.lrange(self.keys.transcript(session_id), start, -1)
        return [json.loads(item) for item in raw]

    def current_key(self, session_id: str, *, archived_at: float | None = None) -> str:
        """Where the transcript is now: the live key, else its newest archived copy."""
        live = self.keys.transcript(session_id)
        if archived_at is not None:
            return f"{live}.deleted.{int(archived_at)}"
        if self.redis.exists(live):
            return live
        archived = sorted(
            (as_text(k) for k in self.redis.scan_iter(match=glob_escape(live) + ".deleted.*")),
            key=lambda k: int(k.rsplit(".", 1)[-1]) if k.rsplit(".", 1)[-1].isdigit() else 0,
        )
        return archived[-1] if archived else live

    def is_live(self, key: str, session_id: str) -> bool:
        return key == self.keys.transcript(session_id)

    def read_key(self, key: str, *, last: int) -> list[dict[str, Any]]:
        """The last ``last`` messages under ``key`` (a live or an archived transcript)."""
        return [json.loads(item) for item in self.redis.lrange(key, -last, -1)]

    def length(self, session_id: str) -> int:
        return int(self.redis.llen(self.keys.transcript(session_id)))

    def length_key(self, key: str) -> int:
        """How many messages are under ``key`` (a live or an archived transcript)."""
        return int(self.redis.llen(key))

    def archive(self, session_id: str, *, now: float | None = None) -> str | None:
        """Rename the transcript to ``<key>.deleted.<ts>``; return the new key or None."""
        src = self.keys.transcript(session_id)
        dst = f"{src}.deleted.{int(now or time.time())}"
        try:
            self.redis.rename(src, dst)
        except redis.ResponseError:
            return None
        return dst
