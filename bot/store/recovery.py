"""The decision to resume a run whose worker was lost: one Lua script, fenced.

Whoever notices a dead worker (its launcher at once, RQ's horse monitor in the fork pool,
another host's reaper when the heartbeat lapses) calls :meth:`RunRecovery.recover` with the
job it saw die. The script alone decides, so two of them noticing the same death resume the
run once (docs/architecture.md, "Resume after a crash"):

- the run must still be executing (``running``, not parked) under that very job
  (``executor``); otherwise it ended, parked, or was resumed already: nothing to do;
- a run whose stop flag is set is never resumed: the caller ends it ``stopped``;
- a run whose worker died more than ``max_resumes`` times is not resumed again: the caller
  ends it ``unknown``;
- else the attempt is counted, the reason kept, the dead heartbeat dropped, and the
  recovery job saved and pushed onto the head of RQ's ``subagents`` queue (it has waited
  long enough: the next free worker takes it), all at once. The run keeps
  its subagent slot (it never left ``fair:slots``), its number, its card and its join.

The script writes RQ's job hash and queue only through :data:`bot.store.rq_layout.RQ_LUA`.
The run-hash fields it writes (``executor``, ``attempt``, ``attempt_ends``, ``resuming``)
are :class:`~bot.types.RunRecord` fields, read with the rest of the run.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from rq.job import Job
from rq.queue import Queue
from rq.utils import now, utcformat

from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.store.rq_layout import RQ_LUA, job_fields

_RECOVER = (
    RQ_LUA
    + """
local f = redis.call('HMGET', KEYS[1], 'status', 'parked_at', 'executor', 'attempt',
  'attempt_ends', 'job_id')
local status, parked, executor, attempt, ends, own = f[1], f[2], f[3], f[4], f[5], f[6]
if status ~= 'running' or (parked and parked ~= '') then return {0, 0} end
local current = executor
if not current or current == '' then current = own or '' end
if ARGV[1] ~= '' and current ~= ARGV[1] then return {0, 0} end
local n = tonumber(attempt) or 1
if redis.call('EXISTS', KEYS[3]) == 1 then return {2, n} end
local list = {}
if ends and ends ~= '' then list = cjson.decode(ends) end
list[#list + 1] = ARGV[4] .. '|' .. ARGV[3]
if n > tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'attempt_ends', cjson.encode(list))
  return {3, n}
end
redis.call('HSET', KEYS[1], 'attempt', n + 1, 'attempt_ends', cjson.encode(list),
  'executor', ARGV[5], 'resuming', ARGV[4])
redis.call('DEL', KEYS[2])
rq_save_enqueued(KEYS[4], ARGV, 7, KEYS[5], ARGV[5], ARGV[6], true)
rq_register_queue(KEYS[6], KEYS[5])
return {1, n + 1}
"""
)
"""KEYS: the run hash, its heartbeat, its stop flag, the recovery job's hash, RQ's
``subagents`` queue, RQ's set of queues. ARGV: the dead job ("" = whichever executes it),
``max_resumes``, why the attempt ended, now, the recovery job's id, its ``enqueued_at``,
then the job's flat fields. Returns ``{code, attempt}``: see :class:`Verdict`."""


class Verdict(enum.IntEnum):
    """What :meth:`RunRecovery.recover` decided."""

    NONE = 0
    """Nothing to do: the run ended, parked, or another noticer resumed it already."""
    RESUMED = 1
    """Its recovery job is queued; ``attempt`` is the attempt it starts."""
    STOPPED = 2
    """Its stop flag is set: end it ``stopped``, never resume it."""
    EXHAUSTED = 3
    """Its worker died ``attempt`` times, more than ``max_resumes``: end it ``unknown``."""


@dataclass(frozen=True, kw_only=True)
class Recovery:
    """The script's answer: the verdict and the attempt it concerns."""

    verdict: Verdict
    attempt: int = 0


class RunRecovery(RedisOwner):
    """Runs the recovery script (see the module docstring)."""

    _recover = Lua(_RECOVER)

    def recover(
        self,
        run_id: str,
        job: Job,
        queue: Queue,
        *,
        dead_job: str,
        max_resumes: int,
        why: str,
    ) -> Recovery:
        """Resume ``run_id`` with ``job`` (created, not saved: its id names the attempt) if
        it still executes under ``dead_job`` ("" = any job)."""
        keys = [
            self.keys.run(run_id),
            self.keys.heartbeat(run_id),
            self.keys.stop_flag(run_id),
            job.key,
            queue.key,
            Queue.redis_queues_keys,
        ]
        job.origin = queue.name
        stamp = utcformat(now())
        job.enqueued_at = now()
        fields = job_fields(job, resumes=run_id)
        args = [dead_job, max_resumes, why, repr(time.time()), job.id, stamp, *fields]
        code, attempt = self._recover(keys=keys, args=args)
        return Recovery(verdict=Verdict(int(code)), attempt=int(as_text(attempt)))
