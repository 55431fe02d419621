"""Recurring runs in Redis, in one owner (:class:`ScheduleStore`).

Structures (keys in :mod:`bot.keys`): one hash per schedule (``schedule:{id}``), the
``schedules`` zset of ids by next tick, and the ``schedules:seq`` counter numbering them.

Exactly once per tick: every worker's maintenance sweep may see a schedule due, but only
the one whose :meth:`ScheduleStore.claim` moves ``next_at`` from the tick it read to the
next one fires it (a compare-and-set in one Lua script). A tick that passed while no
worker swept is claimed once, by the first sweep after, which moves ``next_at`` past now.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.types import ThreadRef

# KEYS: the schedule hash, the zset. ARGV: id, the next_at read, the new next_at, now, the
# firing's note. The tick read must still be the stored one AND be due: a caller that read
# the schedule after another claimed it sees the next tick, which is not its to fire yet.
# The fired tick stays ``pending`` until its run is recorded (see :meth:`ScheduleStore.done`).
_CLAIM = """
local cur = redis.call('HGET', KEYS[1], 'next_at')
if not cur or cur ~= ARGV[2] or tonumber(cur) > tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], 'next_at', ARGV[3], 'last_fired_at', ARGV[4],
  'pending', ARGV[2], 'pending_since', ARGV[4], 'pending_note', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'fired', 1)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
"""

# KEYS: the schedule hash. ARGV: the pending tick, the pending_since read, now.
# A pending tick nobody finished is taken over by exactly one sweep.
_RETAKE = """
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[1]
   or redis.call('HGET', KEYS[1], 'pending_since') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'pending_since', ARGV[3])
return 1
"""

# KEYS: the schedule hash. ARGV: the tick, the run it started ("" = none).
_DONE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'last_run_id', ARGV[2]) end
if redis.call('HGET', KEYS[1], 'pending') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'pending', 'pending_since', 'pending_note')
end
return 1
"""


def stamp(t: float) -> str:
    """How a time is stored (and compared by the claim): milliseconds, fixed format."""
    return f"{t:.3f}"


@dataclass(frozen=True, kw_only=True)
class NewSchedule:
    """A schedule to make: what, how often, where and for whom (:meth:`ScheduleStore.add`).

    Attributes:
        every: The :class:`~bot.runs.schedule_spec.Every` text (``30m``, cron).
        task: What each run is asked to do.
        subagent_type: Type of each run ("" = the default).
        thread: Where it was scheduled from; each run announces there.
        session_key: The requester session its runs belong to.
        requester: ``platform:user_id`` of who scheduled it (each run's requester).
        agent_id: The agent owning the runs.
    """

    every: str
    task: str
    subagent_type: str
    thread: ThreadRef
    session_key: str
    requester: str
    agent_id: str


@dataclass(frozen=True, kw_only=True)
class Schedule(NewSchedule):
    """One recurring run: what it was made with (:class:`NewSchedule`) and its ticks.

    Attributes:
        schedule_id: Its number (``"3"``), unique across the deployment.
        created_at: When it was made (an interval's anchor).
        next_at: The next tick, exactly as stored (the claim compares this text).
        fired: How many times it fired.
        last_fired_at: When it last fired.
        last_run_id: The run it last started.
        pending: A fired tick whose run is not recorded yet ("" = none): the firing
            process may have died in between, so a later sweep starts it (once).
        pending_since: When that firing (or its last retry) began.
        pending_note: That firing's note (lateness).
    """

    schedule_id: str
    created_at: float
    next_at: str
    fired: int = 0
    last_fired_at: float | None = None
    last_run_id: str = ""
    pending: str = ""
    pending_since: float = 0.0
    pending_note: str = ""

    @property
    def next_time(self) -> float:
        return float(self.next_at)


def _encode(s: Schedule) -> dict[str, str]:
    return {
        "id": s.schedule_id,
        "every": s.every,
        "task": s.task,
        "subagent_type": s.subagent_type,
        "thread": json.dumps(s.thread.to_json()),
        "session_key": s.session_key,
        "requester": s.requester,
        "agent_id": s.agent_id,
        "created_at": stamp(s.created_at),
        "next_at": s.next_at,
        "fired": str(s.fired),
    }


def _decode(raw: Mapping[Any, Any]) -> Schedule | None:
    f = {as_text(k): as_text(v) for k, v in raw.items()}
    try:
        return Schedule(
            schedule_id=f["id"],
            every=f["every"],
            task=f["task"],
            subagent_type=f.get("subagent_type", ""),
            thread=ThreadRef.from_json(json.loads(f["thread"])),
            session_key=f["session_key"],
            requester=f["requester"],
            agent_id=f["agent_id"],
            created_at=float(f["created_at"]),
            next_at=f["next_at"],
            fired=int(f.get("fired", "0")),
            last_fired_at=float(f["last_fired_at"]) if f.get("last_fired_at") else None,
            last_run_id=f.get("last_run_id", ""),
            pending=f.get("pending", ""),
            pending_since=float(f.get("pending_since") or 0),
            pending_note=f.get("pending_note", ""),
        )
    except (KeyError, ValueError, TypeError):
        return None


class ScheduleStore(RedisOwner):
    """Owner of the schedules."""

    _claim = Lua(_CLAIM)
    _retake = Lua(_RETAKE)
    _done = Lua(_DONE)

    def add(self, new: NewSchedule, *, next_at: float, now: float | None = None) -> Schedule:
        """Record ``new`` with its first tick ``next_at``; returns it with its number."""
        schedule = Schedule(
            **vars(new),
            schedule_id=str(self.redis.incr(self.keys.schedules_seq)),
            created_at=time.time() if now is None else now,
            next_at=stamp(next_at),
        )
        fields: dict[Any, Any] = _encode(schedule)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.schedule(schedule.schedule_id), mapping=fields)
            pipe.zadd(self.keys.schedules, {schedule.schedule_id: next_at})
            pipe.execute()
        return schedule

    def get(self, schedule_id: str) -> Schedule | None:
        raw: Any = self.redis.hgetall(self.keys.schedule(schedule_id))
        return _decode(raw) if raw else None

    def all(self) -> list[Schedule]:
        """Every schedule, by number."""
        ids = [as_text(i) for i in self.redis.zrange(self.keys.schedules, 0, -1)]
        found = [s for s in map(self.get, ids) if s is not None]
        return sorted(found, key=lambda s: int(s.schedule_id))

    def due(self, *, now: float, limit: int = 500) -> list[Schedule]:
        """Schedules whose next tick is at or before ``now``."""
        raw = self.redis.zrangebyscore(self.keys.schedules, "-inf", now, start=0, num=limit)
        return [s for s in (self.get(as_text(i)) for i in raw) if s is not None]

    def remove(self, schedule_id: str) -> bool:
        """Delete a schedule; False when there was none."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys.schedule(schedule_id))
            pipe.zrem(self.keys.schedules, schedule_id)
            gone, _ = pipe.execute()
        return bool(gone)

    def claim(self, schedule: Schedule, *, next_at: float, now: float, note: str = "") -> bool:
        """Fire ``schedule``'s tick: True for exactly one caller per tick read. The tick
        stays pending until :meth:`done`."""
        return bool(
            self._claim(
                keys=[self.keys.schedule(schedule.schedule_id), self.keys.schedules],
                args=[schedule.schedule_id, schedule.next_at, stamp(next_at), stamp(now), note],
            )
        )

    def unfinished(self, *, now: float, older_than: float) -> list[Schedule]:
        """Schedules with a tick fired at least ``older_than`` seconds ago and no run yet."""
        return [s for s in self.all() if s.pending and s.pending_since <= now - older_than]

    def retake(self, schedule: Schedule, *, now: float) -> bool:
        """Take over ``schedule``'s pending tick: True for exactly one caller."""
        return bool(
            self._retake(
                keys=[self.keys.schedule(schedule.schedule_id)],
                args=[schedule.pending, stamp(schedule.pending_since), stamp(now)],
            )
        )

    def done(self, schedule_id: str, tick: str, run_id: str = "") -> None:
        """``tick`` has its run (``run_id``; "" when it could not start and was told)."""
        self._done(keys=[self.keys.schedule(schedule_id)], args=[tick, run_id])
