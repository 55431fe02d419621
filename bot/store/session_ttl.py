"""How long a requester session's keys live: ``FANBOT_SESSIONS__RETENTION_DAYS`` after
the session's last activity.

A session's history (``session:<key>:history``), its summary (``session:<key>:summary``,
:mod:`bot.store.summaries`), its own model (``session:<key>:model``, ``/model``), run index (``session:<key>:runs``) and run
counter (``session:<key>:seq``) carry a TTL that every write sets again
(:func:`refresh`; the history's script fragment sets its own), so a thread nobody writes
in disappears on its own: Redis runs ``noeviction`` and nothing else would remove it.
:class:`SessionSweep` gives keys without a TTL (written before this existed) one, a bounded
``SCAN`` per maintenance pass. See docs/architecture.md, "Bounded growth and exposure".
"""

from __future__ import annotations

import redis

from bot.keys import Keys, glob_escape
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner

DEFAULT_TTL = 30 * 86_400
"""Stores built without settings (scripts, tests): the setting's default, 30 days."""

SESSION_KEY_SUFFIXES = (":history", ":summary", ":model", ":runs", ":seq")
"""The session keys that expire together (``turn_stop`` and ``joins`` expire on their own)."""


def session_keys(keys: Keys, session_key: str) -> tuple[str, ...]:
    """The keys of ``session_key`` that expire after its retention."""
    return (
        keys.history(session_key),
        keys.session_summary(session_key),
        keys.session_model(session_key),
        keys.session_runs(session_key),
        keys.session_seq(session_key),
    )


def refresh(pipe: redis.client.Pipeline, keys: Keys, session_key: str, ttl: int) -> None:
    """Queue on ``pipe`` the TTL of every key of ``session_key`` (missing ones: no-op)."""
    for key in session_keys(keys, session_key):
        pipe.expire(key, ttl)


# KEYS: candidate keys; ARGV: ttl. A key with no TTL gets the retention minus the time it
# has been idle (OBJECT IDLETIME; not under an LFU policy: then the whole retention), at
# least a second: one idle longer than the retention goes now.
_GIVE_TTL = """
local ttl, given = tonumber(ARGV[1]), 0
for _, key in ipairs(KEYS) do
  if redis.call('TTL', key) == -1 then
    local ok, idle = pcall(redis.call, 'OBJECT', 'IDLETIME', key)
    if not ok or type(idle) ~= 'number' then idle = 0 end
    redis.call('EXPIRE', key, math.max(1, ttl - idle))
    given = given + 1
  end
end
return given
"""


class SessionSweep(RedisOwner):
    """Gives session keys that lack a TTL one, a bounded slice of the keyspace per pass.

    Args:
        redis: Sync client.
        keys: Key builder.
        ttl: The sessions' retention in seconds.
        count: Keys ``SCAN`` looks at per pass (the ``COUNT`` hint).
        every: Seconds between two passes of one round through the keyspace (fleet-wide).
        rest: Seconds between two rounds (a round ends when ``SCAN``'s cursor comes back
            to 0): keys without a TTL only come from before this existed, so the sweep is
            a backfill, not a hot path. 0 and 0: a pass whenever asked (tests).
    """

    _give_ttl = Lua(_GIVE_TTL)

    def __init__(
        self,
        *,
        redis: redis.Redis,
        keys: Keys,
        ttl: int,
        count: int = 500,
        every: int = 10,
        rest: int = 3_600,
    ) -> None:
        super().__init__(redis=redis, keys=keys)
        self.ttl = ttl
        self.count = count
        self.every = every
        self.rest = rest

    def sweep_once(self) -> int:
        """One pass from where the last one stopped (the cursor is kept in Redis, so any
        host's maintenance goes on from there), if one is due; returns how many keys got a
        TTL."""
        wait = self.keys.session_sweep_cursor + ":wait"
        if self.every and not self.redis.set(wait, 1, nx=True, ex=self.every):
            return 0  # the last pass (any host's) was less than ``every`` ago
        raw = self.redis.get(self.keys.session_sweep_cursor)
        cursor = int(as_text(raw)) if raw is not None else 0
        pattern = glob_escape(self.keys.prefix) + "session:*"
        cursor, found = self.redis.scan(cursor, match=pattern, count=self.count)
        names = [as_text(k) for k in found]
        candidates = [k for k in names if k.endswith(SESSION_KEY_SUFFIXES)]
        given = int(self._give_ttl(keys=candidates, args=[self.ttl])) if candidates else 0
        self.redis.set(self.keys.session_sweep_cursor, int(cursor))
        if int(cursor) == 0 and self.rest:
            self.redis.set(wait, 1, ex=self.rest)  # a round is done: rest before the next
        return given
