"""Counters behind bounded use per person and thread (docs/architecture.md "Bounded use").

One owner (:class:`Usage`), shared by every gateway and worker process through Redis; each
check is one Lua script, so two processes never both take the last place.

* Messages per minute (:meth:`Usage.hit`): a counter per person and per thread for each
  fixed one-minute window. A message is counted only when every counter has room (a person
  over their own limit does not use up their thread's); the first message over a limit in a
  window also takes that window's notice marker, so it alone is answered.
  (Fixed windows: a burst straddling a minute's end may get up to twice a limit through.)
* Places (:meth:`Usage.reserve`): a sorted set per person / session of what holds a place
  (run ids; schedule ids), scored by when the place was taken. When a set is full, a member
  that is no longer live (a run that ended: not in ``runs:active``; a schedule removed: not
  in ``schedules``) is dropped, so the sets need no hook at a run's end; one not recorded
  yet (no ``run:{id}`` / ``schedule:{id}`` hash) is kept for ``grace`` seconds, the moment
  between taking a place and recording what holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bot.store.owner import Lua, RedisOwner

_HIT = """
-- KEYS: n counters, then their n notice markers; ARGV: ttl, then the n limits (0: none).
-- Returns {index of the first limit reached (0: none), 1 if this took its notice}.
local n = #KEYS / 2
local ttl = tonumber(ARGV[1])
for i = 1, n do
  local count = redis.call('INCR', KEYS[i])
  if count == 1 then redis.call('EXPIRE', KEYS[i], ttl) end
  local limit = tonumber(ARGV[i + 1])
  if limit > 0 and count > limit then
    for j = 1, i do redis.call('DECR', KEYS[j]) end  -- counted only when within every limit
    local first = redis.call('SET', KEYS[n + i], '1', 'NX', 'EX', ttl)
    return {i, first and 1 or 0}
  end
end
return {0, 0}
"""

_RESERVE = """
-- KEYS[1]: what is live (a set or a zset, ARGV[5]); KEYS[2..]: places, one zset per limit.
-- ARGV: member, now, grace, ttl (0: none), live kind, record key prefix, then one limit
-- per place set. Returns the index (1-based, over the place sets) of the first that is
-- full, or 0 once the member holds a place in each. A full set is pruned first.
local member, now, grace, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local zlive, record = ARGV[5] == 'zset', ARGV[6]
local function prune(key)
  local held = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for j = 1, #held, 2 do
    local m, at = held[j], tonumber(held[j + 1])
    local live
    if zlive then live = redis.call('ZSCORE', KEYS[1], m) else
      live = redis.call('SISMEMBER', KEYS[1], m) == 1 end
    if not live and (at < now - grace or redis.call('EXISTS', record .. m) == 1) then
      redis.call('ZREM', key, m)
    end
  end
end
for i = 2, #KEYS do
  local limit = tonumber(ARGV[i + 5])
  if redis.call('ZCARD', KEYS[i]) >= limit and not redis.call('ZSCORE', KEYS[i], member) then
    prune(KEYS[i])
    if redis.call('ZCARD', KEYS[i]) >= limit then return i - 1 end
  end
end
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], now, member)
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return 0
"""

_RENAME = """
-- KEYS: place sets; ARGV: old member, new member, now. The place ``old`` took is ``new``'s.
for i = 1, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then redis.call('ZADD', KEYS[i], ARGV[3], ARGV[2]) end
end
return 0
"""

WINDOW_SECONDS = 60
"""The messages-per-minute window."""


@dataclass(frozen=True, kw_only=True)
class Hit:
    """What counting one message found.

    Attributes:
        over: Index of the first limit it is over (None: within every limit; counted).
        first: It is the first message over that limit in this window (answer it).
    """

    over: int | None = None
    first: bool = False


@dataclass(frozen=True, kw_only=True)
class Place:
    """One bounded set: its key and how many may hold a place (0: no limit, skipped)."""

    key: str
    limit: int


class Usage(RedisOwner):
    """Owner of the ``limit:*`` counters and place sets."""

    _hit = Lua(_HIT)
    _reserve = Lua(_RESERVE)
    _rename = Lua(_RENAME)

    def hit(self, counters: Sequence[tuple[str, int]], *, window: int) -> Hit:
        """Count one message against each ``(name, limit)`` of window number ``window``
        (``limit`` 0: none); the message is counted only when it is within all of them."""
        keys = [self.keys.limit_messages(name, window) for name, _ in counters]
        keys += [self.keys.limit_notice(name, window) for name, _ in counters]
        args = [2 * WINDOW_SECONDS, *(limit for _, limit in counters)]
        over, first = self._hit(keys=keys, args=args)
        return Hit(over=int(over) - 1, first=bool(first)) if int(over) else Hit()

    def reserve(
        self,
        places: Sequence[Place],
        member: str,
        *,
        live: Literal["runs", "schedules"],
        now: float,
        grace: float,
        ttl: int = 0,
    ) -> int | None:
        """Give ``member`` a place in each of ``places`` (those with a limit), unless one is
        full; returns the index in ``places`` of the first full one (None: reserved)."""
        bounded = [(i, p) for i, p in enumerate(places) if p.limit > 0]
        if not bounded:
            return None
        live_key, kind, record = (
            (self.keys.active_runs, "set", self.keys.run(""))
            if live == "runs"
            else (self.keys.schedules, "zset", self.keys.schedule(""))
        )
        keys = [live_key, *(p.key for _, p in bounded)]
        args: list[str | float | int] = [member, now, grace, ttl, kind, record]
        args += [p.limit for _, p in bounded]
        full = int(self._reserve(keys=keys, args=args))
        return bounded[full - 1][0] if full else None

    def rename(self, places: Sequence[Place], old: str, new: str, *, now: float) -> None:
        """The place ``old`` holds in each of ``places`` is ``new``'s from now on."""
        keys = [p.key for p in places if p.limit > 0]
        if keys:
            self._rename(keys=keys, args=[old, new, now])

    def release(self, places: Sequence[Place], member: str) -> None:
        """``member`` gives up its places (what it held was never recorded)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for place in places:
                pipe.zrem(place.key, member)
            pipe.execute()
