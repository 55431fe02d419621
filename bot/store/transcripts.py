"""A run's transcript: every message of its context, in order (a Redis list of JSON).

Each message's content is kept up to ``max_chars`` (cut with a note), and so are the
arguments of its tool calls: one runaway message cannot make a transcript unreadable.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from bot.clip import clip
from bot.keys import Keys


class TranscriptStore:
    """Append to and read transcripts; archive renames them with a ``.deleted.<ts>`` suffix."""

    def __init__(self, *, redis: redis.Redis, keys: Keys, max_chars: int = 100_000) -> None:
        self.redis = redis
        self.keys = keys
        self.max_chars = max_chars

    def append(self, session_id: str, message: dict[str, Any]) -> None:
        entry = {**message, "ts": round(time.time(), 3)}
        content = entry.get("content")
        if isinstance(content, str) and len(content) > self.max_chars:
            entry["content"] = clip(content, self.max_chars)
        if entry.get("tool_calls"):
            entry["tool_calls"] = [self._bounded_call(c) for c in entry["tool_calls"]]
        self.redis.rpush(self.keys.transcript(session_id), json.dumps(entry))

    def _bounded_call(self, call: Any) -> Any:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return call
        arguments = function.get("arguments")
        if not isinstance(arguments, str) or len(arguments) <= self.max_chars:
            return call
        return {**call, "function": {**function, "arguments": clip(arguments, self.max_chars)}}

    def read(self, session_id: str, *, last: int | None = None) -> list[dict[str, Any]]:
        start = -last if last else 0
        raw = self.redis.lrange(self.keys.transcript(session_id), start, -1)
        return [json.loads(item) for item in raw]

    def length(self, session_id: str) -> int:
        return int(self.redis.llen(self.keys.transcript(session_id)))

    def archive(self, session_id: str, *, now: float | None = None) -> str | None:
        """Rename the transcript to ``<key>.deleted.<ts>``; return the new key or None."""
        src = self.keys.transcript(session_id)
        dst = f"{src}.deleted.{int(now or time.time())}"
        try:
            self.redis.rename(src, dst)
        except redis.ResponseError:
            return None
        return dst
