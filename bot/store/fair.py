"""Fair sharing of the subagent slots between sessions (the owner of ``{p}fair:*``).

A spawned run's RQ job is saved *held* (status ``rate_limited``, in no queue) and its id goes
on its session's waiting list in the same transaction. **Admission** is one Lua script: while
a slot is free (fewer than ``max_concurrent`` holders in ``fair:slots``) it picks the next
session and moves that session's oldest waiting run into ``fair:slots`` *and* onto RQ's
``subagents`` queue (status ``queued``), all at once. So:

- *exactly once*: a run leaves its waiting list, takes a slot and becomes visible to RQ in one
  atomic step; any number of gateways and workers may call :meth:`FairQueue.admit`
  concurrently (Redis runs scripts one at a time), and no process can die half-way through
  an admission. Creating the job and joining the line is one ``MULTI`` as well;
- *fair*: the next slot goes to the waiting session holding the fewest slots, ties to the
  one served least recently (round-robin among equals). A session that spawned twenty runs
  and holds every slot loses the next freed slot to a session that holds none; sessions with
  long backlogs converge to an equal split. ``max_concurrent_per_session`` is a hard cap:
  a session at its cap is skipped while others use the free slots.

A new run spawned while nobody waits and a slot is free (no per-session cap set) takes the
slot in the submitting script without passing through its line: the end state the line
would reach at once, in fewer commands.

The terminal transition (``finalize``) drops a run from ``fair:slots``; whoever ended it
then calls :meth:`FairQueue.admit`, and the maintenance sweep calls it every pass too, so a
process that dies in between delays the next admission by one sweep, never loses it. A
stopped run still waiting is withdrawn; one missed is skipped by the admission (its run is
no longer ``queued`` or its job was canceled). RQ's own failure modes after admission (a
worker dying between its pop and its horse) are repaired by :mod:`workers.repair`, which
treats ``fair:slots`` like an RQ concurrency lane.

The scripts touch RQ's job hashes and queue lists only through the Lua functions of
:data:`bot.store.rq_layout.RQ_LUA`, where the assumptions about RQ's layout are listed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq.job import Job
from rq.queue import Queue
from rq.utils import now, utcformat

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import Lua, RedisOwner
from bot.store.rq_layout import RQ_LUA, job_fields

_FREE_SLOT = """
local function free_slot(k, a)
  if k[1] ~= '' and a[1] ~= '' then redis.call('ZREM', k[1], a[1]) end
end
"""
FREE_SLOT = Fragment(name="free_slot", lua=_FREE_SLOT, keys=1, args=1)
"""A run's terminal transition frees the slot its job held, as a piece of the finalize
script (``k[1]``: ``fair:slots`` or ``""`` for none; ``a[1]``: the job id); the caller
admits the next run afterwards. See :mod:`bot.store.lua_parts`."""


def free_slot_part(slots_key: str, job_id: str) -> Part:
    """:data:`FREE_SLOT`'s part for ``job_id`` (``slots_key`` "": no slot to free)."""
    return Part(fragment=FREE_SLOT, keys=(slots_key,), args=(job_id,))


_ADMIT = (
    RQ_LUA
    + """
local function admit()
  local admitted = {}
  if redis.call('ZCARD', KEYS[2]) == 0 then return admitted end  -- nobody waits
  local cap = tonumber(ARGV[2])
  local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
  if free <= 0 then return admitted end
  local held = {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local s = redis.call('HGET', ARGV[6] .. id, 'session_key')
    if s then held[s] = (held[s] or 0) + 1 end
  end
  local ring = {}
  local flat = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #flat, 2 do ring[flat[i]] = tonumber(flat[i + 1]) end
  while free > 0 do
    local best, best_n, best_t = nil, 0, 0
    for s, t in pairs(ring) do
      local n = held[s] or 0
      if (cap == 0 or n < cap) and (best == nil or n < best_n
          or (n == best_n and (t < best_t or (t == best_t and s < best)))) then
        best, best_n, best_t = s, n, t
      end
    end
    if best == nil then break end
    local wkey = ARGV[5] .. best
    local run, job = nil, nil
    while run == nil do
      local id = redis.call('LPOP', wkey)
      if not id then break end
      -- a resume job (its own id) names the parked run it resumes in 'fanbot_run'
      local rid = rq_run_of(id)
      local status = redis.call('HGET', ARGV[6] .. rid, 'status')
      local parked = redis.call('HGET', ARGV[6] .. rid, 'parked_at')
      local waiting = status == 'queued'
        or (status == 'running' and parked and parked ~= '' and rid ~= id)
      if waiting and rq_held(id) then
        run, job = rid, id
      end
    end
    if run then
      -- a resume holds its run's slot under the run's id: name the job that holds it
      if run ~= job then redis.call('HSET', ARGV[6] .. run, 'resume_job', job) end
      redis.call('ZADD', KEYS[1], ARGV[3], run)
      rq_enqueue(KEYS[4], job, ARGV[4])
      held[best] = best_n + 1
      admitted[#admitted + 1] = run
      free = free - 1
      best_t = redis.call('INCR', KEYS[3])
      redis.call('HSET', KEYS[6], best, best_t)
    end
    if redis.call('LLEN', wkey) > 0 then
      ring[best] = best_t
      redis.call('ZADD', KEYS[2], best_t, best)
    else
      ring[best] = nil
      redis.call('ZREM', KEYS[2], best)
    end
  end
  return admitted
end
"""
)

_ADMIT_ONLY = _ADMIT + "return admit()\n"

_JOIN = """
local function join(run, session)
  local wkey = ARGV[5] .. session
  if redis.call('ZSCORE', KEYS[1], run) or redis.call('LPOS', wkey, run) then return 0 end
  redis.call('RPUSH', wkey, run)
  -- a session never served (or forgotten) counts as served just before the last one
  -- served: ahead of it, behind the sessions that have waited longer
  local served = redis.call('HGET', KEYS[6], session)
  local score = served and tonumber(served) or (tonumber(redis.call('GET', KEYS[3]) or '0') - 0.5)
  redis.call('ZADD', KEYS[2], 'NX', score, session)
  rq_register_queue(KEYS[5], KEYS[4])
  return 1
end
"""

_TAKE_FREE = """
-- A new run's own job while nobody waits, a slot is free and no per-session cap applies:
-- joining the line then admitting would hand it that slot at once; this is the same end
-- state (saved queued, on RQ's queue, in fair:slots, its session served now) in fewer steps.
local function take_free(job, session, resumes)
  if resumes ~= '' or tonumber(ARGV[2]) > 0 then return false end
  if redis.call('ZCARD', KEYS[2]) > 0 then return false end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return false end
  if redis.call('ZSCORE', KEYS[1], job) then return false end
  if redis.call('HGET', ARGV[6] .. job, 'status') ~= 'queued' then return false end
  rq_save_enqueued(KEYS[7], ARGV, 10, KEYS[4], job, ARGV[4])
  rq_register_queue(KEYS[5], KEYS[4])
  redis.call('ZADD', KEYS[1], ARGV[3], job)
  redis.call('HSET', KEYS[6], session, redis.call('INCR', KEYS[3]))
  return true
end
"""

_SUBMIT = (
    _ADMIT
    + _JOIN
    + _TAKE_FREE
    + """
if take_free(ARGV[7], ARGV[8], ARGV[9]) then return {ARGV[7]} end
rq_save(KEYS[7], ARGV, 10)
join(ARGV[7], ARGV[8])
return admit()
"""
)

_REJOIN = (
    _ADMIT
    + _JOIN
    + """
local rejoined = {}
for i = 7, #ARGV, 2 do
  local run = ARGV[i]
  -- held by this line (RQ's own lane marks its jobs with a rate_limit_key)
  if rq_held(run) and not rq_field(run, 'rate_limit_key')
      and redis.call('HGET', ARGV[6] .. run, 'status') == 'queued'
      and join(run, ARGV[i + 1]) == 1 then
    rejoined[#rejoined + 1] = run
  end
end
admit()
return rejoined
"""
)

_WITHDRAW = (
    RQ_LUA
    + """
-- a resume job (its own id) names the parked run it resumes
local run = rq_run_of(ARGV[1])
local s = redis.call('HGET', ARGV[2] .. run, 'session_key')
if not s then return 0 end
local wkey = ARGV[3] .. s
local n = redis.call('LREM', wkey, 0, ARGV[1])
if redis.call('LLEN', wkey) == 0 then redis.call('ZREM', KEYS[1], s) end
return n
"""
)

_PRUNE = """
local keep = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local s = redis.call('HGET', ARGV[1] .. id, 'session_key')
  if s then keep[s] = true end
end
local pruned = 0
for _, s in ipairs(redis.call('HKEYS', KEYS[3])) do
  if not keep[s] and not redis.call('ZSCORE', KEYS[2], s) then
    redis.call('HDEL', KEYS[3], s)
    pruned = pruned + 1
  end
end
return pruned
"""

_SNAPSHOT = """
local holders = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  holders[#holders + 1] = redis.call('HGET', ARGV[2] .. id, 'session_key') or ''
end
local ring = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local out = {holders, ring, redis.call('LRANGE', KEYS[3], 0, -1)}
for i = 1, #ring, 2 do
  local live = {}  -- a run ended while waiting (and not withdrawn) is no longer in line
  for _, id in ipairs(redis.call('LRANGE', ARGV[1] .. ring[i], 0, -1)) do
    if redis.call('HGET', ARGV[2] .. id, 'status') == 'queued' then live[#live + 1] = id end
  end
  out[#out + 1] = live
end
return out
"""


@dataclass(frozen=True, kw_only=True)
class Line:
    """Who holds and who waits for the subagent slots, at one instant.

    Attributes:
        held: Slots each session holds.
        served: Each waiting session's last-served tick (lower: served longer ago).
        waiting: Each waiting session's run ids, oldest first.
        admitted: Job ids admitted and on RQ's queue, waiting for a free worker.
    """

    held: Mapping[str, int]
    served: Mapping[str, float]
    waiting: Mapping[str, Sequence[str]]
    admitted: Sequence[str] = ()


def next_session(line: Line, held: Mapping[str, int], cap: int | None) -> str | None:
    """The session the next free slot goes to (pure; the rule the admission script applies):
    fewest slots held, then served longest ago, then by name; sessions at ``cap`` wait."""
    ready = [s for s, runs in line.waiting.items() if runs]
    under = [s for s in ready if cap is None or held.get(s, 0) < cap]
    if not under:
        return None
    return min(under, key=lambda s: (held.get(s, 0), line.served.get(s, 0.0), s))


def line_order(line: Line, cap: int | None = None) -> list[str]:
    """Waiting run ids in the order they are expected to start (pure): each step gives the
    next slot to :func:`next_session`, assuming no run ends meanwhile; sessions held back only
    by ``cap`` come last, in the same fashion."""
    held = dict(line.held)
    served = dict(line.served)
    queues = {s: list(runs) for s, runs in line.waiting.items() if runs}
    tick = max(served.values(), default=0.0)
    order: list[str] = []
    while queues:
        view = Line(held=held, served=served, waiting=queues)
        session = next_session(view, held, cap) or next_session(view, held, None)
        assert session is not None  # queues is not empty
        order.append(queues[session].pop(0))
        held[session] = held.get(session, 0) + 1
        tick += 1
        served[session] = tick
        if not queues[session]:
            del queues[session]
    return order


class FairQueue(RedisOwner):
    """The subagent slots and the per-session lines waiting for them.

    Args:
        redis: Sync client (``decode_responses`` off, as RQ needs).
        keys: Key builder.
        queue: RQ's queue the admitted runs go to.
    """

    _submit = Lua(_SUBMIT)
    _admit = Lua(_ADMIT_ONLY)
    _withdraw = Lua(_WITHDRAW)
    _snapshot = Lua(_SNAPSHOT)
    _prune = Lua(_PRUNE)
    _rejoin = Lua(_REJOIN)

    def __init__(self, *, redis: Redis, keys: Keys, queue: Queue) -> None:
        super().__init__(redis=redis, keys=keys)
        self.queue = queue

    @property
    def slots_key(self) -> str:
        """The sorted set of runs holding a slot (``finalize`` removes a run from it)."""
        return self.keys.fair_slots

    def _keys(self) -> list[str]:
        k = self.keys
        return [
            k.fair_slots,
            k.fair_sessions,
            k.fair_tick,
            self.queue.key,
            Queue.redis_queues_keys,
            k.fair_served,
        ]

    def _args(self, max_concurrent: int, cap: int | None) -> list[Any]:
        return [
            max_concurrent,
            cap or 0,
            time.time(),
            utcformat(now()),
            self.keys.fair_waiting(""),
            self.keys.run(""),
        ]

    def submit(
        self,
        job: Job,
        *,
        session_key: str,
        max_concurrent: int,
        cap: int | None,
        resumes: str = "",
    ) -> list[str]:
        """Save ``job`` (created with status :data:`~bot.store.rq_layout.HELD_STATUS`), put it in its session's
        line and admit what fits, in one script (no process can die between them, and a
        spawn waits for one round trip). ``resumes``: the parked run a resume job (another
        id) continues; its slot is the run's. Returns the run ids admitted."""
        args = [*self._args(max_concurrent, cap), job.id, session_key, resumes]
        args += job_fields(job, resumes=resumes)
        admitted = self._submit(keys=[*self._keys(), job.key], args=args)
        return [as_text(i) for i in admitted]

    def admit(self, *, max_concurrent: int, cap: int | None) -> list[str]:
        """Give free slots to waiting runs, fairly; returns the run ids admitted."""
        admitted = self._admit(keys=self._keys(), args=self._args(max_concurrent, cap))
        return [as_text(i) for i in admitted]

    def rejoin(self, runs: Mapping[str, str], *, max_concurrent: int, cap: int | None) -> list[str]:
        """Repair: put back in line the queued runs (``run_id -> session_key``) whose held
        job is in no line and holds no slot (a line lost with Redis's last second of writes);
        admits what fits. Returns the run ids put back."""
        if not runs:
            return []
        args = self._args(max_concurrent, cap)
        for run_id, session_key in runs.items():
            args += [run_id, session_key]
        return [as_text(i) for i in self._rejoin(keys=self._keys(), args=args)]

    def withdraw(self, job_id: str) -> bool:
        """Take a job out of its line (its run was stopped before its turn): a run's own
        job (id = run id) or a parked run's resume job; True if it was in."""
        args = [job_id, self.keys.run(""), self.keys.fair_waiting("")]
        return bool(self._withdraw(keys=[self.keys.fair_sessions], args=args))

    def holders(self) -> list[str]:
        """Run ids holding a slot, by admission time."""
        return [as_text(i) for i in self.redis.zrange(self.keys.fair_slots, 0, -1)]

    def release(self, run_id: str) -> bool:
        """Free the slot of a run that no longer needs it (repair); True if it held one."""
        return bool(self.redis.zrem(self.keys.fair_slots, run_id))

    def prune(self) -> int:
        """Forget when sessions that neither wait nor hold a slot were last served."""
        keys = [self.keys.fair_slots, self.keys.fair_sessions, self.keys.fair_served]
        return int(self._prune(keys=keys, args=[self.keys.run("")]))

    def waiting_count(self) -> int:
        """Runs waiting in every session's line."""
        line = self.line()
        return sum(len(runs) for runs in line.waiting.values())

    def line(self) -> Line:
        """Who holds and who waits, read atomically (one round trip)."""
        raw = self._snapshot(
            keys=[self.keys.fair_slots, self.keys.fair_sessions, self.queue.key],
            args=[self.keys.fair_waiting(""), self.keys.run("")],
        )
        held: dict[str, int] = {}
        for session in raw[0]:
            held[as_text(session)] = held.get(as_text(session), 0) + 1
        ring = [as_text(x) for x in raw[1]]
        sessions = ring[0::2]
        served = {s: float(t) for s, t in zip(sessions, ring[1::2], strict=True)}
        waiting = {s: [as_text(i) for i in ids] for s, ids in zip(sessions, raw[3:], strict=True)}
        admitted = [as_text(i) for i in raw[2]]
        return Line(held=held, served=served, waiting=waiting, admitted=admitted)
