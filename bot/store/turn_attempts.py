"""Main-agent turns in flight: their recorded steps, their lease, and the fenced decision to
run a lost one again (docs/architecture.md, "Resume after a crash", "Turns").

A turn is known by its reply key (:attr:`bot.store.jobs.TurnJob.reply_key`), the same in
every attempt. While an attempt executes it holds:

- an entry in ``turns:inflight`` (reply key -> JSON ``{job, attempt, state, since,
  payload}``): the job executing it (or queued to), which attempt that is, and the turn's
  wire payload (a string of JSON, so the scripts never re-encode it). ``state`` is
  ``running`` (an attempt executes it), ``queued`` (its next attempt is decided, its job
  queued or about to be), ``parked`` (a tool call waits for a person's approval, named by
  ``approval``: no job holds it, nothing reaps it; the decision queues its resume job, see
  docs/architecture.md, "Approvals: one gate"), or ``lost``/``stopped`` (it is not run
  again: its closing line is due). The turn's commit deletes the entry in its reply's transaction, so a turn that
  answered is never run again;
- a lease key (expires ``stale_after_seconds`` after its last refresh): proof that a worker
  still executes it;
- a done marker once it answered (or was closed), kept as long as the steps would be;
- the steps list: its user message, then every message it appended (one ``RPUSHX`` each),
  kept for the turn timeout plus an hour. A new attempt goes on from there.

Every noticer of a dead worker (launcher, horse monitor, reaper) calls :meth:`decide` with
the job it saw die; the script alone decides, compare-and-set on that job, so a death
noticed twice is acted on once.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.store.transcripts import bounded

RUNNING = "running"
QUEUED = "queued"
LOST = "lost"
STOPPED = "stopped"
PARKED = "parked"

_BEGIN = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local n = tonumber(ARGV[3])
if cur then
  local e = cjson.decode(cur)
  if e.job ~= ARGV[2] or (e.state ~= 'queued' and e.state ~= 'running') then return false end
  e.state = 'running'
  e.since = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
elseif n > 1 then
  return false
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[6])
redis.call('EXPIRE', KEYS[3], ARGV[7])
return redis.call('LRANGE', KEYS[3], 0, -1)
"""
"""KEYS: the in-flight hash, the turn's lease, its steps. ARGV: the reply key, this job,
its attempt, the entry of a first attempt, now, the lease's TTL in ms, the steps' TTL in
seconds (renewed for a later attempt). Returns the recorded steps, or nil when this job is
not (or no longer) the turn's attempt."""

_DECIDE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  -- killed before it began: unless the turn is done (answered), it was its first attempt
  if ARGV[6] == '' or redis.call('EXISTS', KEYS[4]) == 1 then return {0, 0, '', ''} end
  cur = ARGV[6]
end
local e = cjson.decode(cur)
if ARGV[2] == '' or e.job ~= ARGV[2] then return {0, 0, '', ''} end
if e.state ~= 'running' and e.state ~= 'queued' then return {0, 0, '', ''} end
local n = tonumber(e.attempt) or 1
local code = 1
if redis.call('EXISTS', KEYS[3]) == 1 then
  e.state = 'stopped'
  code = 2
elseif n > tonumber(ARGV[3]) then
  e.state = 'lost'
  code = 3
else
  n = n + 1
  e.state = 'queued'
  e.attempt = n
  e.job = string.gsub(e.job, '%-r%d+$', '') .. '-r' .. n
end
e.since = tonumber(ARGV[4])
e.why = ARGV[5]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
redis.call('DEL', KEYS[2])
return {code, n, e.job, e.payload}
"""
"""KEYS: the in-flight hash, the turn's lease, its session's turn stop flag, its done
marker. ARGV: the reply key, the dead job, ``max_resumes``, now, why the attempt ended, the
entry the dead job would have written had it begun ("" = none known). Returns ``{code,
attempt, job, payload}``: see :class:`TurnVerdict`."""


_PARK = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local e = cjson.decode(cur)
if e.job ~= ARGV[2] or e.state ~= 'running' then return 0 end
e.state = 'parked'
e.approval = ARGV[3]
e.since = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
redis.call('DEL', KEYS[2])
redis.call('EXPIRE', KEYS[3], ARGV[5])
return 1
"""
"""KEYS: the in-flight hash, the turn's lease, its steps. ARGV: the reply key, the job
parking it, the approval, now, how long its steps are kept. 1 when parked."""

_UNPARK = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local e = cjson.decode(cur)
if e.state ~= 'parked' or e.approval ~= ARGV[2] then return 0 end
e.state = 'queued'
e.job = ARGV[3]
e.since = tonumber(ARGV[4])
e.payload = ARGV[5]
e.approval = nil
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 1
"""
"""KEYS: the in-flight hash, the turn's steps. ARGV: the reply key, the decided approval,
the resume job, now, the resume job's payload, the steps' TTL. 1 when it is to be queued."""


class TurnVerdict(enum.IntEnum):
    """What :meth:`TurnAttempts.decide` decided."""

    NONE = 0
    """Nothing to do: the turn answered, or is not executed by that job (any more)."""
    RESUMED = 1
    """Attempt ``attempt`` is due: its job (id ``job``) is to be queued now."""
    STOPPED = 2
    """Its stop flag is set: say it stopped, never run it again."""
    EXHAUSTED = 3
    """Its worker died ``attempt`` times, more than ``max_resumes`` allow: say it is lost."""


@dataclass(frozen=True, kw_only=True)
class TurnDecision:
    """The script's answer."""

    verdict: TurnVerdict
    attempt: int = 0
    job_id: str = ""
    payload: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class InFlight:
    """One entry of ``turns:inflight`` (see the module docstring)."""

    reply_key: str
    job_id: str
    attempt: int
    state: str
    since: float
    payload: dict[str, Any]
    approval: str = ""
    """The approval a ``parked`` turn waits for."""


class TurnAttempts(RedisOwner):
    """The turns in flight; see the module docstring.

    Args:
        redis: Sync client.
        keys: Key builder.
        max_chars: A recorded message's content (and tool-call arguments) is cut beyond this.
        ttl_seconds: How long a turn's steps are kept after its last write.
    """

    _begin = Lua(_BEGIN)
    _decide = Lua(_DECIDE)
    _park = Lua(_PARK)
    _unpark = Lua(_UNPARK)

    def __init__(
        self, *, redis: redis.Redis, keys: Keys, max_chars: int = 100_000, ttl_seconds: int = 4200
    ) -> None:
        super().__init__(redis=redis, keys=keys)
        self.max_chars = max_chars
        self.ttl_seconds = ttl_seconds

    def begin(
        self,
        reply_key: str,
        *,
        job_id: str,
        attempt: int,
        payload: Mapping[str, Any],
        lease_seconds: float,
        resumes: bool = False,
        now: float | None = None,
    ) -> list[dict[str, Any]] | None:
        """Take the turn's lease for ``job_id`` and return what earlier attempts recorded
        (``[]`` for a first attempt); None when ``job_id`` is not the turn's attempt: a
        later one superseded it, or the turn answered already. ``resumes``: the job goes
        on with a parked turn (an approval's resume), never a first attempt: it needs the
        turn's entry naming it."""
        now = time.time() if now is None else now
        entry = _entry(job_id, attempt, RUNNING, now, payload)
        lease_ms = int(lease_seconds * 1000)
        first = attempt if not resumes else max(2, attempt)
        args = [reply_key, job_id, first, entry, repr(now), lease_ms, self.ttl_seconds]
        keys = [self.keys.turns_in_flight, self.keys.turn_lease(reply_key)]
        raw = self._begin(keys=[*keys, self.keys.turn_steps(reply_key)], args=args)
        if raw is None:
            return None
        return [json.loads(item) for item in raw]

    def beat(self, reply_key: str, job_id: str, *, lease_seconds: float) -> None:
        """Refresh the turn's lease (one ``SET``)."""
        self.redis.set(self.keys.turn_lease(reply_key), job_id, px=int(lease_seconds * 1000))

    def record(
        self, reply_key: str, messages: Sequence[Mapping[str, Any]], *, first: bool = False
    ) -> None:
        """Append ``messages`` to the turn's steps: one ``RPUSHX`` (``first``: the turn's
        first write, its user message, which creates the list with its expiry in the same
        round trip). Only to a list that exists: a turn fenced or answered meanwhile (its
        steps deleted) leaves no list without an expiry behind."""
        if not messages:
            return
        key = self.keys.turn_steps(reply_key)
        entries = [json.dumps(bounded(m, self.max_chars)) for m in messages]
        if not first:
            self.redis.rpushx(key, *entries)
            return
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.rpush(key, *entries)
            pipe.expire(key, self.ttl_seconds)
            pipe.execute()

    def finish(self, reply_key: str, *, pipe: Any = None) -> None:
        """The turn answered (or was closed): it is no longer in flight, and its done
        marker says so to a noticer of a job that died before it began. With ``pipe``,
        queued on the caller's transaction (the reply's)."""
        target = pipe if pipe is not None else self.redis.pipeline()
        target.hdel(self.keys.turns_in_flight, reply_key)
        target.delete(self.keys.turn_steps(reply_key), self.keys.turn_lease(reply_key))
        target.set(self.keys.turn_done(reply_key), 1, ex=self.ttl_seconds)
        if pipe is None:
            target.execute()

    def decide(
        self,
        reply_key: str,
        *,
        dead_job: str,
        stop_flag: str,
        max_resumes: int,
        why: str,
        payload: Mapping[str, Any] | None = None,
        now: float | None = None,
    ) -> TurnDecision:
        """The job ``dead_job`` that executed (or was queued to execute) the turn is lost:
        its next attempt, its stop, or its end (see :class:`TurnVerdict`), decided and
        marked at once. ``stop_flag``: the key of the turn's session stop flag.
        ``payload``: the dead job's (a noticer that saw it executing): a turn not in
        flight and not done was killed before it began, in that job's attempt."""
        now = time.time() if now is None else now
        keys = [self.keys.turns_in_flight, self.keys.turn_lease(reply_key), stop_flag]
        keys.append(self.keys.turn_done(reply_key))
        unbegun = ""
        if payload is not None:
            attempt = int(payload.get("attempt") or 1)
            unbegun = _entry(dead_job, attempt, RUNNING, now, payload)
        args = [reply_key, dead_job, max_resumes, repr(now), why, unbegun]
        code, attempt, job_id, payload = self._decide(keys=keys, args=args)
        verdict = TurnVerdict(int(code))
        if verdict is TurnVerdict.NONE:
            return TurnDecision(verdict=verdict)
        return TurnDecision(
            verdict=verdict,
            attempt=int(attempt),
            job_id=as_text(job_id),
            payload=json.loads(as_text(payload)),
        )

    def in_flight(self) -> list[InFlight]:
        """Every turn in flight (bounded by the turns executing or queued to resume)."""
        raw = self.redis.hgetall(self.keys.turns_in_flight)
        found = (_in_flight(as_text(key), value) for key, value in raw.items())
        return [entry for entry in found if entry is not None]

    def get(self, reply_key: str) -> InFlight | None:
        raw = self.redis.hget(self.keys.turns_in_flight, reply_key)
        return None if raw is None else _in_flight(reply_key, raw)

    def park(
        self,
        reply_key: str,
        *,
        job_id: str,
        approval_id: str,
        keep_seconds: float,
        now: float | None = None,
    ) -> bool:
        """The attempt ``job_id`` parks the turn on ``approval_id``: its job ends, its lease
        goes, its steps are kept ``keep_seconds`` (past the approval's deadline). False when
        ``job_id`` is not (any more) the turn's running attempt."""
        now = time.time() if now is None else now
        keys = [self.keys.turns_in_flight, self.keys.turn_lease(reply_key)]
        keys.append(self.keys.turn_steps(reply_key))
        args = [reply_key, job_id, approval_id, repr(now), max(1, int(keep_seconds))]
        return bool(self._park(keys=keys, args=args))

    def unpark(
        self, reply_key: str, *, approval_id: str, job_id: str, now: float | None = None
    ) -> dict[str, Any] | None:
        """The turn parked on ``approval_id`` is decided: mark it ``queued`` under the resume
        job ``job_id`` (its payload carries the approval); returns that payload to queue, or
        None when the turn is not parked on it (decided already, or gone)."""
        now = time.time() if now is None else now
        entry = self.get(reply_key)
        if entry is None or entry.state != PARKED or entry.approval != approval_id:
            return None
        payload = {**entry.payload, "approval_id": approval_id}
        keys = [self.keys.turns_in_flight, self.keys.turn_steps(reply_key)]
        args = [reply_key, approval_id, job_id, repr(now), json.dumps(payload), self.ttl_seconds]
        return payload if self._unpark(keys=keys, args=args) else None

    def parked_on(self, reply_key: str) -> str:
        """The approval the turn waits for ("" when it is not parked)."""
        entry = self.get(reply_key)
        return entry.approval if entry is not None and entry.state == PARKED else ""

    def lease_alive(self, reply_key: str) -> bool:
        return bool(self.redis.exists(self.keys.turn_lease(reply_key)))


def _in_flight(reply_key: str, raw: Any) -> InFlight | None:
    """One entry as read (None when malformed: nothing any attempt could act on)."""
    try:
        e = json.loads(raw)
        return InFlight(
            reply_key=reply_key,
            job_id=str(e["job"]),
            attempt=int(e["attempt"]),
            state=str(e["state"]),
            since=float(e["since"]),
            payload=json.loads(e["payload"]),
            approval=str(e.get("approval") or ""),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _entry(job_id: str, attempt: int, state: str, since: float, payload: Mapping[str, Any]) -> str:
    data = {"job": job_id, "attempt": attempt, "state": state, "since": since}
    return json.dumps({**data, "payload": json.dumps(dict(payload))})
