"""A session's summary of its compacted turns (a Redis hash beside its history).

When a main-agent turn's call would not fit the model's window, its older turns are
compacted into a summary (:mod:`bot.agent.compaction`); the summary is kept here and the
history entries it covers are removed in the same script, so the next turn starts from the
summary and the recent history. It expires with the session (:mod:`bot.store.session_ttl`).
``/context`` shows it (docs/models.md, "Threads that outgrow the window").
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.store.session_ttl import DEFAULT_TTL

# KEYS: history, summary. ARGV: text, made_at, ttl, then the JSON of the covered entries,
# oldest first. Each covered entry is removed from the history's head when it is there (one
# the history's own bound dropped meanwhile is skipped); an entry appended since is kept.
_REPLACE = """
local removed = 0
for i = 4, #ARGV do
  if redis.call('LINDEX', KEYS[1], 0) == ARGV[i] then
    redis.call('LPOP', KEYS[1])
    removed = removed + 1
  end
end
local total = tonumber(redis.call('HGET', KEYS[2], 'covered') or '0') + removed
redis.call('HSET', KEYS[2], 'text', ARGV[1], 'made_at', ARGV[2], 'covered', total)
redis.call('EXPIRE', KEYS[2], ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return removed
"""


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A session's summary.

    Attributes:
        text: What the compacted turns said.
        made_at: Unix time it was written.
        covered: History entries compacted into it so far, all compactions together.
    """

    text: str
    made_at: float
    covered: int


class SummaryStore(RedisOwner):
    """Read and replace a session's summary.

    Args:
        redis: Sync client.
        keys: Key builder.
        ttl: Seconds the session lives after its last write.
    """

    _replace = Lua(_REPLACE)

    def __init__(self, *, redis: redis.Redis, keys: Keys, ttl: int = DEFAULT_TTL) -> None:
        super().__init__(redis=redis, keys=keys)
        self.ttl = ttl

    def get(self, session_key: str) -> Summary | None:
        raw = self.redis.hgetall(self.keys.session_summary(session_key))
        if not raw:
            return None
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        try:
            return Summary(
                text=fields.get("text", ""),
                made_at=float(fields.get("made_at") or 0),
                covered=int(fields.get("covered") or 0),
            )
        except ValueError:
            return None

    def replace(
        self,
        session_key: str,
        text: str,
        *,
        covered: list[dict[str, Any]],
        now: float | None = None,
    ) -> int:
        """Keep ``text`` as the session's summary and remove the ``covered`` history
        entries (as loaded, oldest first); returns how many were removed."""
        made_at = time.time() if now is None else now
        args = [text, repr(made_at), self.ttl, *(json.dumps(m) for m in covered)]
        history = self.keys.history(session_key)
        summary = self.keys.session_summary(session_key)
        return int(self._replace(keys=[history, summary], args=args))
