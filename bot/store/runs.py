"""The runs registry: one hash per run in Redis, the source of truth for run status.

Every terminal transition goes through :meth:`RunsRegistry.end`, one Lua script (the
finalize script, :mod:`bot.store.finalize_script`) that compare-and-sets the status, stamps
``ended_at``, drops the run from the active set and from its subagent slot, writes the
announce to the outbox and the result to the requester's history, and schedules archiving —
all or nothing. Repeats are no-ops, so every path that may end a run (the job itself, RQ
callbacks, the reaper, a stop) can call it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from bot.keys import Keys, glob_escape
from bot.store import as_text
from bot.store.estimates import Sample, sample_part
from bot.store.fair import free_slot_part
from bot.store.finalize_script import FinalizeParts, FinalizeScript
from bot.store.history import append_history_part
from bot.store.joins import JOIN_TTL_SECONDS, leave_join_part
from bot.store.lua_parts import Fragment, Part
from bot.store.metrics import MetricsStore, Update, Write
from bot.store.outbox import put_outbound_part
from bot.store.owner import Lua, RedisOwner
from bot.store.progress import PROGRESS_MAXLEN, PUT_PROGRESS_LUA, final_progress_part
from bot.store.run_codec import decode_record, encode_record
from bot.store.session_ttl import DEFAULT_TTL, refresh
from bot.store.stops import recheck_run_part
from bot.store.workspace import HASHES_LUA
from bot.types import Outbound, RunRecord, RunStatus

__all__ = [
    "Ended",
    "Finalization",
    "OutSnapshot",
    "RunStart",
    "RunsRegistry",
    "decode_record",
    "encode_record",
]

STOP_FLAG_TTL = 86_400
"""How long a run's stop flag stays set (seconds)."""

_END_RUN = """
local function end_run(k, a)
  if k[5] ~= '' then redis.call('SET', k[5], '1', 'EX', a[6]) end
  local now = redis.call('HMGET', k[1], 'status', a[7], 'executor')
  local cur, tools = now[1], now[2]
  if cur ~= 'queued' and cur ~= 'running' then return 0 end
  -- an attempt whose run went on in a later one (bot.store.recovery) ends nothing
  if a[8] ~= '' and now[3] and now[3] ~= '' and now[3] ~= a[8] then return 0 end
  local fields = cjson.decode(a[5])
  redis.call('HSET', k[1], 'status', a[1], 'ended_at', a[2], unpack(fields))
  for i = 1, #fields, 2 do
    if fields[i] == a[7] then tools = fields[i + 1] end
  end
  redis.call('SREM', k[2], a[3])
  if a[4] ~= '' then redis.call('ZADD', k[4], a[4], a[3]) end
  if not tools or not string.match(tools, '^%d+$') then tools = '0' end
  local inbox = redis.call('LRANGE', k[6], 0, -1)
  local receipts = {}
  if #inbox > 0 then
    -- pushed and drained together with the inbox: empty when it is
    receipts = redis.call('LRANGE', k[7], 0, -1)
    redis.call('DEL', k[3], k[6], k[7])
  else
    redis.call('DEL', k[3])
  end
  return 1, tools, inbox, receipts
end
"""
END_RUN = Fragment(name="end_run", lua=_END_RUN, keys=7, args=8)
"""The registry's step of the finalize script (:mod:`bot.store.finalize_script`): the
compare-and-set to terminal, which is the only decision. KEYS: the run hash, the active set,
its heartbeat, ``archive_due``, its stop flag ("" = do not raise it), its inbox and the
inbox's receipts (taken: what the run never read, :meth:`RunsRegistry.drain_inbox_receipts`). ARGV: the status,
``ended_at``, the run id, when to archive ("" = never), more fields as a flat JSON list of
strings, the stop flag's TTL, :data:`TOOLS_FIELD`, the job that ends it ("" = whoever: an
attempt's own end passes its job, and ends nothing once a later attempt executes the run).
The flag is raised whether or not the run
ends here (a stop that lost the race to the run's own end still asks its job to stop).
Returns 1, the run's saved tool count, and the inbox's messages and receipts taken, if it
ended the run; else 0."""

TOOLS_FIELD = "tool_calls"
"""Run-hash field with the run's tool calls so far (not a :class:`RunRecord` field); the
finalize script puts it on the run's last progress event."""

_CREATE_JOINED = """
local joined = 0
if redis.call('HGET', KEYS[5], 'state') == 'open' then
  redis.call('SADD', KEYS[6], ARGV[1])
  redis.call('SADD', KEYS[7], ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[4])
  redis.call('EXPIRE', KEYS[7], ARGV[4])
  joined = 1
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
if joined == 0 then
  redis.call('HSET', KEYS[1], 'join_id', '')
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return joined
"""

_START = (
    HASHES_LUA
    + PUT_PROGRESS_LUA
    + """
local record = redis.call('HGETALL', KEYS[1])
local run = {}
for i = 1, #record, 2 do run[record[i]] = record[i + 1] end
local writes = nil
if ARGV[3] == '1' then
  local parked = run['parked_at']
  if run['status'] == 'running' and parked and parked ~= '' then writes = {'parked_at', ''} end
elseif ARGV[3] == '2' then
  -- a recovery job starts only the attempt the recovery script queued it for
  if run['status'] == 'running' and run['executor'] == ARGV[10]
      and (run['resuming'] or '') ~= '' then writes = {'resuming', ''} end
elseif run['status'] == 'queued' then
  writes = {'status', 'running', 'started_at', ARGV[1]}
end
local started = 0
if writes then
  started = 1
  if ARGV[10] ~= '' then
    writes[#writes + 1] = 'executor'
    writes[#writes + 1] = ARGV[10]
  end
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  if ARGV[6] ~= '' then
    local flat = file_hashes(ARGV[4] .. (run['session_key'] or ''), ARGV[5])
    local snapshot = {}
    for i = 1, #flat, 2 do snapshot[flat[i]] = flat[i + 1] end
    writes[#writes + 1] = ARGV[6]
    writes[#writes + 1] = cjson.encode(snapshot)
  end
  redis.call('HSET', KEYS[1], unpack(writes))
  if ARGV[7] ~= '' then
    put_progress(KEYS[5], ARGV[9], ARGV[8], run['thread'] or '', ARGV[7], ARGV[1])
  end
end
return {started, redis.call('EXISTS', KEYS[3]), record, redis.call('LLEN', KEYS[4])}
"""
)
"""KEYS: the run hash, its heartbeat, stop flag and inbox; the progress stream. ARGV: now,
heartbeat ttl (ms), '1' to resume a parked run or '2' to recover one (its worker was lost;
:mod:`bot.store.recovery`), the workspace key prefix, the snapshot's SCAN pattern and hash
field ('' = none), the progress text ('' = none), the run id, the stream's MAXLEN, the job
starting it (its ``executor``; '' = not known). Returns ``{started, stop flag set, the hash
as it was, inbox length}``."""

_PLACES = (
    PUT_PROGRESS_LUA
    + """
local shown = 0
for i = 4, #ARGV, 2 do
  local run = ARGV[3] .. ARGV[i]
  local status, thread = unpack(redis.call('HMGET', run, 'status', 'thread'))
  if status == 'queued' and thread then
    put_progress(KEYS[1], ARGV[2], ARGV[i], thread, ARGV[i + 1], ARGV[1])
    shown = shown + 1
  end
end
return shown
"""
)
"""KEYS: the progress stream. ARGV: now, the stream's MAXLEN, the run hash key prefix, then
(run id, text) pairs. Puts each text on its run's card if the run still waits; returns how
many."""


_READ_FOR_END = (
    HASHES_LUA
    + """
local flat = redis.call('HGETALL', KEYS[1])
local run = {}
for i = 1, #flat, 2 do run[flat[i]] = flat[i + 1] end
local now = {}
if run[ARGV[3]] and (tonumber(run['depth'] or '') or 1) <= 1 then
  now = file_hashes(ARGV[1] .. (run['session_key'] or ''), ARGV[2])
end
return {flat, now}
"""
)
"""KEYS: the run hash. ARGV: the workspace key prefix, the snapshot's SCAN pattern and hash
field. Returns ``{the hash, path, sha1... of those files now}``; the files only when the run
kept a snapshot at its start and is a root run (a child reports to its parent run, with no
files)."""


_BEAT = """
local executor = redis.call('HGET', KEYS[1], 'executor')
if executor and executor ~= '' and executor ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""
"""KEYS: the run hash, its heartbeat. ARGV: the beating job, now, the TTL (ms). Returns 0
(and beats not) once another job executes the run."""


@dataclass(frozen=True, kw_only=True)
class OutFiles:
    """What a run's end reads to tell which ``out/`` files it wrote.

    Attributes:
        before: The snapshot its start kept (``{path: sha1}`` as JSON; None: no snapshot).
        now: Path -> sha1 of those files now (empty without a snapshot, and for a child).
    """

    before: str | None
    now: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class OutSnapshot:
    """Files of the run's session workspace to snapshot into its hash when it starts.

    Attributes:
        pattern: SCAN pattern of the files (:func:`bot.store.workspace.below`).
        field: The run-hash field that keeps ``{path: sha1}`` as JSON.
    """

    pattern: str
    field: str


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """What :meth:`RunsRegistry.start` found and did, in its one round trip.

    Attributes:
        record: The run as it was just before (None: there is no such run).
        started: This call moved it to executing (queued -> running, or parked -> resumed).
        stop_requested: Its stop flag was set.
        inbox: Messages waiting in its inbox (left there).
        tools: Its tool calls so far (:data:`TOOLS_FIELD`).
    """

    record: RunRecord | None
    started: bool
    stop_requested: bool = False
    inbox: int = 0
    tools: int = 0


@dataclass(frozen=True, kw_only=True)
class Finalization:
    """What a terminal transition writes besides the status.

    Attributes:
        status: The terminal status.
        result: Final answer (may be partial).
        notes: Errors, warnings, partial progress.
        announce: The message for the requester's thread; ``None`` posts nothing.
        history_entry: JSON message appended to the requester session's history.
        archive_at: Unix time to archive the child session, if any.
        extra: More run fields to set (tokens, cost...).
        ended_at: When it ended.
        raise_stop: Raise the run's stop flag too (a stop; raised even if the run had
            ended meanwhile, as a stop always did).
        recheck_at: When the maintenance sweep re-checks the run's hard stop (a stop whose
            job executes; None: no re-check). Also written either way.
        quiet: The run announces nothing (``ANNOUNCE_SKIP``): its last progress event
            takes its status card away.
        metrics: The metric updates of the run's end.
        executor: The job of the attempt ending it ("" = not an attempt's own end): it
            ends nothing once a later attempt executes the run.
        sample: What the run adds to its type's and model's spawn estimates (None:
            nothing; :mod:`bot.store.estimates`).
    """

    status: RunStatus
    result: str = ""
    notes: str = ""
    announce: Outbound | None = None
    history_entry: dict[str, Any] | None = None
    archive_at: float | None = None
    extra: Mapping[str, str | int | float] | None = None
    ended_at: float = field(default_factory=time.time)
    raise_stop: bool = False
    recheck_at: float | None = None
    quiet: bool = False
    metrics: tuple[Update, ...] = ()
    executor: str = ""
    sample: Sample | None = None


@dataclass(frozen=True, kw_only=True)
class Ended:
    """What :meth:`RunsRegistry.end` did.

    Attributes:
        code: 0: it had ended already; 1: this call ended it; 2: and fired its join.
        leftovers: The ``(message, receipt id)`` pairs it never read ("" for no receipt).
    """

    code: int
    leftovers: tuple[tuple[str, str], ...] = ()


class RunsRegistry(RedisOwner):
    """Reads and writes run records (sync; the gateway calls it from a worker thread).

    Args:
        redis: A sync Redis client (``decode_responses`` off).
        keys: The key builder for this deployment's prefix.
        history_max: How many history messages a requester session keeps.
        metrics: This process's metrics (the finalize script writes the updates it keeps).
    """

    _create_joined = Lua(_CREATE_JOINED)
    _start = Lua(_START)
    _places = Lua(_PLACES)
    _read_for_end = Lua(_READ_FOR_END)
    _beat = Lua(_BEAT)

    def __init__(
        self,
        *,
        redis: redis.Redis,
        keys: Keys,
        history_max: int = 60,
        metrics: MetricsStore | None = None,
        session_ttl: int = DEFAULT_TTL,
    ) -> None:
        super().__init__(redis=redis, keys=keys)
        self.history_max = history_max
        self.session_ttl = session_ttl  # bot.store.session_ttl: each write sets it again
        self._finalize = FinalizeScript(redis=redis, end_run=END_RUN)
        self._metrics = metrics or MetricsStore(redis=redis, keys=keys)

    def next_seq(self, session_key: str) -> int:
        with self.redis.pipeline() as pipe:
            pipe.incr(self.keys.session_seq(session_key))
            # its own TTL only: the run's create, which follows, sets the session's again
            pipe.expire(self.keys.session_seq(session_key), self.session_ttl)
            return int(pipe.execute()[0])

    def create(self, record: RunRecord) -> bool:
        """Record a new run; one with a ``join_id`` joins that fan-in in the same script,
        if it is still open (else its ``join_id`` is stored empty). True if it joined."""
        if record.join_id:
            return self._create_in_join(record)
        with self.redis.pipeline() as pipe:
            pipe.hset(
                self.keys.run(record.run_id), mapping=cast("dict[Any, Any]", encode_record(record))
            )
            pipe.zadd(
                self.keys.session_runs(record.session_key), {record.run_id: record.created_at}
            )
            pipe.zadd(self.keys.all_runs, {record.run_id: record.created_at})
            pipe.sadd(self.keys.active_runs, record.run_id)
            refresh(pipe, self.keys, record.session_key, self.session_ttl)
            pipe.execute()
        return False

    def _create_in_join(self, record: RunRecord) -> bool:
        keys = [
            self.keys.run(record.run_id),
            self.keys.session_runs(record.session_key),
            self.keys.all_runs,
            self.keys.active_runs,
            self.keys.join(record.join_id),
            self.keys.join_pending(record.join_id),
            self.keys.join_runs(record.join_id),
        ]
        args: list[str | float | int] = [
            record.run_id,
            record.created_at,
            record.join_id,
            JOIN_TTL_SECONDS,
        ]
        for name, value in encode_record(record).items():
            args.extend([name, value])
        joined = bool(self._create_joined(keys=keys, args=args))
        with self.redis.pipeline() as pipe:
            refresh(pipe, self.keys, record.session_key, self.session_ttl)
            pipe.execute()
        return joined

    def get(self, run_id: str) -> RunRecord | None:
        raw = self.redis.hgetall(self.keys.run(run_id))
        return decode_record(raw) if raw else None

    def get_for_end(
        self, run_id: str, snapshot: OutSnapshot
    ) -> tuple[RunRecord | None, OutFiles | None]:
        """The run, and what its end needs to tell which files it wrote (see
        :class:`OutFiles`), in one round trip: the run's finalize writes its announce next.
        Files None: the workspace could not be read (the run is read alone)."""
        keys = [self.keys.run(run_id)]
        args = [self.keys.workspace(""), snapshot.pattern, snapshot.field]
        try:
            flat, now = self._read_for_end(keys=keys, args=args)
        except redis.ResponseError:  # a workspace that is no hash: the run still ends
            return self.get(run_id), None
        raw = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        before = raw.get(snapshot.field.encode())
        files = OutFiles(
            before=None if before is None else as_text(before),
            now={as_text(now[i]): as_text(now[i + 1]) for i in range(0, len(now), 2)},
        )
        return (decode_record(raw) if raw else None), files

    def get_many(self, run_ids: Iterable[str]) -> list[RunRecord]:
        with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(self.keys.run(run_id))
            return [decode_record(raw) for raw in pipe.execute() if raw]

    def all_ids(self) -> list[str]:
        """Every run id still indexed, oldest first."""
        return [as_text(i) for i in self.redis.zrange(self.keys.all_runs, 0, -1)]

    def all(self) -> list[RunRecord]:
        """Every run still indexed, oldest first (records that expired are skipped)."""
        return self.get_many(self.all_ids())

    def recent_ids(self, limit: int) -> list[str]:
        """The ``limit`` newest run ids still indexed, newest first."""
        return [as_text(i) for i in self.redis.zrevrange(self.keys.all_runs, 0, limit - 1)]

    def session_runs(self, session_key: str) -> list[RunRecord]:
        """Runs spawned from ``session_key``, newest first."""
        ids = self.redis.zrevrange(self.keys.session_runs(session_key), 0, -1)
        return self.get_many(as_text(i) for i in ids)

    def sessions_under(self, session_key: str) -> list[RunRecord]:
        """Runs of ``session_key`` and of every session nested below it
        (``<session_key>:thread:<ts>`` and the like), newest first."""
        pattern = self.keys.session_runs(glob_escape(session_key) + ":*")
        keys = [self.keys.session_runs(session_key)]
        keys += [as_text(k) for k in self.redis.scan_iter(match=pattern, count=500)]
        scored: dict[str, float] = {}
        for key in keys:
            pairs = cast(
                "list[tuple[bytes, float]]", self.redis.zrange(key, 0, -1, withscores=True)
            )
            for member, score in pairs:
                scored[as_text(member)] = float(score)
        return self.get_many(sorted(scored, key=lambda i: scored[i], reverse=True))

    def active_ids(self) -> set[str]:
        return {as_text(i) for i in self.redis.smembers(self.keys.active_runs)}

    def active_statuses(self) -> list[str]:
        """The status of every run not terminal yet (one round trip after the set)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for run_id in self.active_ids():
                pipe.hget(self.keys.run(run_id), "status")
            return [as_text(s) for s in pipe.execute() if s is not None]

    def update(self, run_id: str, *, client: Any = None, **values: str | int | float) -> None:
        """Set fields of the run's hash (``client``: a pipeline to queue the write on)."""
        target = self.redis if client is None else client
        target.hset(self.keys.run(run_id), mapping={k: str(v) for k, v in values.items()})

    def field(self, run_id: str, name: str) -> str | None:
        """One field of the run's hash that :class:`RunRecord` does not carry (or None)."""
        raw = self.redis.hget(self.keys.run(run_id), name)
        return None if raw is None else as_text(raw)

    def start(
        self,
        run_id: str,
        *,
        heartbeat_ttl: float,
        resume: bool = False,
        recover: bool = False,
        job_id: str = "",
        snapshot: OutSnapshot | None = None,
        progress: str = "",
    ) -> RunStart:
        """Job ``job_id`` starts executing ``run_id``, in one script (its first model
        request waits for this): queued -> running, a parked run resumed (``resume``), or
        the next attempt of a run whose worker was lost (``recover``), with a first
        heartbeat; only then the ``snapshot`` of its workspace and a ``progress`` event.
        Reads the run, its stop flag and how many messages wait in its inbox too."""
        now = time.time()
        keys = [
            self.keys.run(run_id),
            self.keys.heartbeat(run_id),
            self.keys.stop_flag(run_id),
            self.keys.inbox(run_id),
            self.keys.progress,
        ]
        args: list[str | float | int] = [
            repr(now),
            int(heartbeat_ttl * 1000),
            "2" if recover else "1" if resume else "",
            self.keys.workspace(""),
            snapshot.pattern if snapshot else "",
            snapshot.field if snapshot else "",
            progress,
            run_id,
            PROGRESS_MAXLEN,
            job_id,
        ]
        started, stop, flat, inbox = self._start(keys=keys, args=args)
        raw = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        tools = as_text(raw.get(TOOLS_FIELD.encode(), b"0"))
        record = decode_record(raw) if raw else None
        if record is not None and started and job_id:
            record = dataclasses.replace(record, executor=job_id)  # as the script wrote
        return RunStart(
            record=record,
            started=bool(started),
            stop_requested=bool(stop),
            inbox=int(inbox),
            tools=int(tools) if tools.isdigit() else 0,
        )

    def park(self, run_id: str, *, rounds: int, **values: str | int | float) -> None:
        """The run waits for its children with no job: no heartbeat is expected."""
        with self.redis.pipeline() as pipe:
            fields = {k: str(v) for k, v in values.items()}
            fields |= {"parked_at": str(time.time()), "rounds": str(rounds)}
            pipe.hset(self.keys.run(run_id), mapping=cast("dict[Any, Any]", fields))
            pipe.delete(self.keys.heartbeat(run_id))
            pipe.execute()

    def beat(self, run_id: str, *, ttl: float, executor: str = "") -> bool:
        """Refresh the run's heartbeat; with ``executor`` only while that job executes
        it (False: a later attempt took the run over, bot.store.recovery)."""
        if not executor:
            self.redis.set(self.keys.heartbeat(run_id), time.time(), px=int(ttl * 1000))
            return True
        keys = [self.keys.run(run_id), self.keys.heartbeat(run_id)]
        return bool(self._beat(keys=keys, args=[executor, repr(time.time()), int(ttl * 1000)]))

    def heartbeat_alive(self, run_id: str) -> bool:
        return bool(self.redis.exists(self.keys.heartbeat(run_id)))

    def request_stop(self, run_id: str, *, ttl: int = STOP_FLAG_TTL) -> None:
        self.redis.set(self.keys.stop_flag(run_id), "1", ex=ttl)

    def show_waiting(self, texts: Iterable[tuple[str, str]]) -> int:
        """Put ``(run id, text)`` on each run's status card while the run still waits
        (``queued``), in one round trip, reading only each run's status and thread;
        returns how many were shown."""
        args: list[str | float | int] = [time.time(), PROGRESS_MAXLEN, self.keys.run("")]
        for run_id, text in texts:
            args += [run_id, text]
        return int(self._places(keys=[self.keys.progress], args=args))

    def stop_requested(self, run_id: str) -> bool:
        return bool(self.redis.exists(self.keys.stop_flag(run_id)))

    def push_inbox(self, run_id: str, message: str, *, receipt: str = "") -> None:
        """Queue ``message`` for the run; ``receipt`` (a receipt id, :mod:`bot.runs.steer_receipts`)
        travels beside it in a parallel list written in the same transaction."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(self.keys.inbox(run_id), message)
            pipe.rpush(self.keys.inbox_receipts(run_id), receipt)
            pipe.expire(self.keys.inbox_receipts(run_id), 7 * 86_400)
            pipe.execute()

    def drain_inbox_receipts(self, run_id: str) -> list[tuple[str, str]]:
        """Take every queued ``(message, receipt id)``; "" for a message without one."""
        with self.redis.pipeline() as pipe:
            pipe.lrange(self.keys.inbox(run_id), 0, -1)
            pipe.lrange(self.keys.inbox_receipts(run_id), 0, -1)
            pipe.delete(self.keys.inbox(run_id), self.keys.inbox_receipts(run_id))
            items, receipts, _ = pipe.execute()
        ids = [as_text(r) for r in receipts] + [""] * len(items)
        return [(as_text(m), ids[i]) for i, m in enumerate(items)]

    def archive_at(self, run_id: str) -> float | None:
        """When the run's child session is due to be archived, if scheduled."""
        score = self.redis.zscore(self.keys.archive_due, run_id)
        return float(score) if score is not None else None

    def due_for_archive(self, *, now: float, limit: int = 200) -> list[str]:
        raw = self.redis.zrangebyscore(self.keys.archive_due, "-inf", now, start=0, num=limit)
        return [as_text(i) for i in raw]

    def unschedule_archive(self, *run_ids: str) -> None:
        if run_ids:
            self.redis.zrem(self.keys.archive_due, *run_ids)

    def mark_archived(
        self, record: RunRecord, *, now: float, keep_seconds: int, transcript_key: str | None
    ) -> None:
        """Stamp ``archived_at``, unschedule it, and let the run (with its status record
        and archived transcript) expire after ``keep_seconds``; prune the indexes."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(self.keys.run(record.run_id), "archived_at", str(now))
            pipe.zrem(self.keys.archive_due, record.run_id)
            for key in (self.keys.run(record.run_id), self.keys.status_message(record.run_id)):
                pipe.expire(key, keep_seconds)
            if transcript_key is not None:
                pipe.expire(transcript_key, keep_seconds)
            pipe.zremrangebyscore(self.keys.all_runs, "-inf", now - keep_seconds)
            pipe.zremrangebyscore(
                self.keys.session_runs(record.session_key), "-inf", now - keep_seconds
            )
            pipe.execute()

    def end(
        self,
        record: RunRecord,
        outcome: Finalization,
        *,
        slot_key: str | None = None,
        join_grace: float = 5.0,
    ) -> Ended:
        """Atomically end ``record``'s run: :attr:`Ended.code` 0 if it had ended already, 1
        if this call ended it, 2 if that also fired its join (it was the join's last pending
        run), with the messages the run never read (taken from its inbox by the same script).
        The script's compare-and-set is the decision (:mod:`bot.store.finalize_script`);
        it also writes the metric updates this process kept (:mod:`bot.store.metrics`)."""
        with self._metrics.carried() as carried:
            parts = self._parts(record, outcome, carried, slot_key, join_grace)
            code, inbox, receipts = self._finalize(parts)
        if code == 0:  # it had ended: the script stopped before the metrics
            self._metrics.keep(carried)
        ids = [as_text(r) for r in receipts] + [""] * len(inbox)
        return Ended(code=code, leftovers=tuple((as_text(m), ids[i]) for i, m in enumerate(inbox)))

    def _parts(
        self,
        record: RunRecord,
        outcome: Finalization,
        carried: list[Write],
        slot_key: str | None,
        join_grace: float,
    ) -> FinalizeParts:
        started = record.started_at
        return FinalizeParts(
            recheck=recheck_run_part(self.keys, record.run_id, at=outcome.recheck_at),
            end=self._end_part(record, outcome),
            announce=put_outbound_part(self.keys, outcome.announce),
            history=append_history_part(
                self.keys,
                record.session_key,
                outcome.history_entry,
                max_messages=self.history_max,
                ttl=self.session_ttl,
            ),
            slot=free_slot_part(slot_key or "", record.job_id),
            progress=final_progress_part(
                self.keys,
                run_id=record.run_id,
                thread=record.thread,
                status=outcome.status.value,
                ts=outcome.ended_at,
                elapsed=None if started is None else outcome.ended_at - started,
                quiet=outcome.quiet,
            ),
            metrics=self._metrics.part(outcome.metrics, carried),
            join=leave_join_part(
                self.keys,
                record.join_id,
                run_id=record.run_id,
                now=outcome.ended_at,
                grace=join_grace,
            ),
            sample=sample_part(
                self.keys,
                subagent_type=record.subagent_type,
                model=record.model,
                sample=outcome.sample,
            ),
        )

    def _end_part(self, record: RunRecord, outcome: Finalization) -> Part:
        """:data:`END_RUN`'s part: the status and fields to write."""
        extra: dict[str, str | int | float] = {"result": outcome.result, "notes": outcome.notes}
        extra.update(outcome.extra or {})
        # As redis-py would encode each value as an argument (str() of a float is its repr).
        fields = [str(item) for pair in extra.items() for item in pair]
        keys = (
            self.keys.run(record.run_id),
            self.keys.active_runs,
            self.keys.heartbeat(record.run_id),
            self.keys.archive_due,
            self.keys.stop_flag(record.run_id) if outcome.raise_stop else "",
            self.keys.inbox(record.run_id),
            self.keys.inbox_receipts(record.run_id),
        )
        args = (
            outcome.status.value,
            outcome.ended_at,
            record.run_id,
            outcome.archive_at if outcome.archive_at is not None else "",
            json.dumps(fields),
            STOP_FLAG_TTL,
            TOOLS_FIELD,
            outcome.executor,
        )
        return Part(fragment=END_RUN, keys=keys, args=args)
