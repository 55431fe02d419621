"""Fan-ins ("joins"): the runs one main-agent turn waits for, and when to continue.

A join moves ``open -> sealed -> fired -> started``, or to ``cancelled`` from any of the
first three. The turn that spawns opens it with its first joined run
(:meth:`~bot.store.runs.RunsRegistry.create` adds each run to ``join:{id}:pending`` in the same script that
records the run, and only while the join is open); the turn seals it when it ends. The join
fires when it is sealed and its pending set is empty, decided in one script: by the seal
(every run already ended) or by the terminal transition of its last run (the finalize script
in :mod:`bot.store.runs`, which calls the same Lua below). Firing puts the join on
``joins:ready``; a dispatcher claims it there with a lease and enqueues the continuation turn
under a fixed job id, so a dispatcher that dies is replaced by the maintenance sweep and a
second one finds the job already enqueued. The continuation turn ``start``\\ s the join,
which only one can; ``/stop`` cancels it until then.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import Lua, RedisOwner

JOIN_TTL_SECONDS = 7 * 86_400
"""Join keys expire this long after opening (longer than any run may last)."""

FIRE_LUA = """
local function fire(join, ready, opn, join_id, now, grace)
  redis.call('HSET', join, 'state', 'fired', 'fired_at', now)
  redis.call('ZADD', ready, tonumber(now) + tonumber(grace), join_id)
  redis.call('ZREM', opn, join_id)
end
"""
"""Shared by the seal below and :data:`LEAVE_JOIN`: mark fired, due for dispatch."""

_LEAVE_JOIN = """
local function leave_join(k, a)
  if k[1] == '' then return 0 end
  redis.call('SREM', k[2], a[1])
  if redis.call('HGET', k[1], 'state') == 'sealed' and redis.call('SCARD', k[2]) == 0 then
    fire(k[1], k[3], k[4], a[2], a[3], a[4])
    return 1
  end
  return 0
end
"""
LEAVE_JOIN = Fragment(name="leave_join", lua=FIRE_LUA + _LEAVE_JOIN, keys=4, args=4)
"""A run leaves its join as a piece of the finalize script (keys: the join, its pending set,
``joins:ready``, ``joins:open`` or all ``""`` for no join; ``a``: the run id, the join id,
now, the dispatch grace); returns 1 if that fired the join (it was the last pending run,
and the join is sealed). See :mod:`bot.store.lua_parts`."""


def leave_join_part(keys: Keys, join_id: str, *, run_id: str, now: float, grace: float) -> Part:
    """:data:`LEAVE_JOIN`'s part for ``run_id`` ending (``join_id`` "": in no join)."""
    names = (
        (keys.join(join_id), keys.join_pending(join_id), keys.joins_ready, keys.joins_open)
        if join_id
        else ("", "", "", "")
    )
    return Part(fragment=LEAVE_JOIN, keys=names, args=(run_id, join_id, now, grace))


_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGET', KEYS[1], 'state') == 'open' and 1 or 0
end
redis.call('HSET', KEYS[1], 'state', 'open', 'created_at', ARGV[2], 'session_key', ARGV[3],
  'round', ARGV[4], 'origin', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return 1
"""

_SEAL = (
    FIRE_LUA
    + """
if redis.call('HGET', KEYS[1], 'state') ~= 'open' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'sealed', 'sealed_at', ARGV[2])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('SCARD', KEYS[2]) == 0 then
  fire(KEYS[1], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
  return 2
end
return 1
"""
)

_CANCEL = """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'open' and state ~= 'sealed' and state ~= 'fired' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'cancelled_at', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
return 1
"""

_START = """
if redis.call('HGET', KEYS[1], 'state') ~= 'fired' then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'started', 'started_at', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return 1
"""

_CLAIM = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
if ARGV[4] ~= '1' and tonumber(score) > tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
return 1
"""


@dataclass(frozen=True, kw_only=True)
class JoinRecord:
    """One fan-in as stored.

    Attributes:
        join_id: Its id (derived from the turn's session and message).
        state: ``open``, ``sealed``, ``fired``, ``started`` or ``cancelled``.
        session_key: The requester session the continuation runs in.
        round: Which continuation round of its user message this join leads to (1 = the
            first follow-up of the user's message).
        origin: What the continuation turn needs of the turn that opened it (thread,
            platform, sender, agent).
        run_ids: Every run that joined, in no particular order.
        pending: The joined runs not yet ended.
    """

    join_id: str
    state: str
    session_key: str
    round: int
    origin: dict[str, Any] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    created_at: float = 0.0
    fired_at: float | None = None


class Joins(RedisOwner):
    """Owner of the ``join:*`` keys, ``joins:open``, ``joins:ready`` and the sessions'
    ``joins`` sets (the finalize script in :mod:`bot.store.runs` fires joins too).

    Args:
        redis: Sync client.
        keys: Key builder.
        grace_seconds: How long a fired join waits on ``joins:ready`` for the process that
            fired it before the maintenance sweep may dispatch it instead.
    """

    _open = Lua(_OPEN)
    _seal = Lua(_SEAL)
    _cancel = Lua(_CANCEL)
    _start = Lua(_START)
    _claim = Lua(_CLAIM)

    def __init__(self, *, redis: redis.Redis, keys: Keys, grace_seconds: float = 5.0) -> None:
        super().__init__(redis=redis, keys=keys)
        self.grace_seconds = grace_seconds

    def open(self, join_id: str, *, session_key: str, round_: int, origin: dict[str, Any]) -> bool:
        """Create the join (idempotent); True while it is open and runs may join it."""
        keys = [self.keys.join(join_id), self.keys.joins_open, self.keys.session_joins(session_key)]
        args: list[str | float] = [
            join_id,
            time.time(),
            session_key,
            round_,
            json.dumps(origin),
            JOIN_TTL_SECONDS,
        ]
        return bool(self._open(keys=keys, args=args))

    def seal(self, join_id: str) -> bool:
        """No more runs will join; True if that fired the join (all its runs had ended)."""
        keys = [
            self.keys.join(join_id),
            self.keys.join_pending(join_id),
            self.keys.joins_ready,
            self.keys.joins_open,
        ]
        fired = self._seal(keys=keys, args=[join_id, time.time(), self.grace_seconds])
        return bool(fired == 2)

    def cancel(self, join_id: str) -> bool:
        """Cancel a join not yet continued; True if this call cancelled it."""
        return self._settle(self._cancel, join_id, self.keys.joins_ready, self.keys.joins_open)

    def start(self, join_id: str) -> bool:
        """The continuation turn begins; True for exactly one caller of a fired join."""
        return self._settle(self._start, join_id, self.keys.joins_ready)

    def _settle(self, script: Any, join_id: str, *lists: str) -> bool:
        """Run ``script`` (cancel or start) over the join's hash, ``lists`` and its session's
        joins, with the join id and now; False when the join is gone."""
        record = self.get(join_id)
        if record is None:
            return False
        keys = [self.keys.join(join_id), *lists, self.keys.session_joins(record.session_key)]
        return bool(script(keys=keys, args=[join_id, time.time()]))

    def claim(self, join_id: str, *, lease: float = 30.0, force: bool = False) -> bool:
        """Take a fired join off ``joins:ready`` for ``lease`` seconds to dispatch it;
        ``force`` claims before its grace is over (the process that fired it)."""
        args: list[str | float] = [join_id, time.time(), lease, "1" if force else "0"]
        return bool(self._claim(keys=[self.keys.joins_ready], args=args))

    def dispatched(self, join_id: str) -> None:
        self.redis.zrem(self.keys.joins_ready, join_id)

    def ready_due(self, *, now: float | None = None, limit: int = 100) -> list[str]:
        """Fired joins nobody has dispatched (their firer died, or is slow)."""
        now = time.time() if now is None else now
        raw = self.redis.zrangebyscore(self.keys.joins_ready, "-inf", now, start=0, num=limit)
        return [as_text(m) for m in raw]

    def open_before(self, cutoff: float, *, limit: int = 100) -> list[str]:
        """Joins opened before ``cutoff`` and never sealed (their turn died)."""
        raw = self.redis.zrangebyscore(self.keys.joins_open, "-inf", cutoff, start=0, num=limit)
        return [as_text(m) for m in raw]

    def of_session(self, session_key: str) -> list[str]:
        """The session's joins that may still lead to a continuation."""
        return sorted(as_text(m) for m in self.redis.smembers(self.keys.session_joins(session_key)))

    def get(self, join_id: str) -> JoinRecord | None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.join(join_id))
            pipe.smembers(self.keys.join_runs(join_id))
            pipe.smembers(self.keys.join_pending(join_id))
            raw, members, pending = pipe.execute()
        if not raw:
            return None
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        fired = fields.get("fired_at")
        return JoinRecord(
            join_id=join_id,
            state=fields.get("state", ""),
            session_key=fields.get("session_key", ""),
            round=int(fields.get("round", "1")),
            origin=json.loads(fields.get("origin", "{}")),
            run_ids=tuple(sorted(as_text(m) for m in members)),
            pending=tuple(sorted(as_text(m) for m in pending)),
            created_at=float(fields.get("created_at", "0")),
            fired_at=float(fired) if fired else None,
        )
