"""Pending hard stops and turn-stop flags: what a stop asked for and must re-check.

``stops:pending`` holds what still needs a hard stop if it keeps executing: run ids, and
turn jobs under the :data:`TURN_MEMBER` prefix, each scored by when to re-check. The
session's ``turn_stop`` flag asks a running main-agent turn to end at its next step.
"""

from __future__ import annotations

import time

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import RedisOwner

TURN_MEMBER = "turn:"
"""``stops:pending`` members with this prefix name a turn job; the others are run ids."""

_RECHECK_RUN = """
local function recheck_run(k, a)
  if a[2] ~= '' then redis.call('ZADD', k[1], a[2], a[1]) end
end
"""
RECHECK_RUN = Fragment(name="recheck_run", lua=_RECHECK_RUN, keys=1, args=2)
""":meth:`Stops.recheck_run` as a piece of a script spanning owners (``a``: the run id, when
to re-check it or ``""`` for no re-check); see :mod:`bot.store.lua_parts`."""


def recheck_run_part(keys: Keys, run_id: str, *, at: float | None) -> Part:
    """:data:`RECHECK_RUN`'s part: re-check ``run_id``'s hard stop ``at`` (None: do not)."""
    return Part(
        fragment=RECHECK_RUN, keys=(keys.stops_pending,), args=(run_id, "" if at is None else at)
    )


class Stops(RedisOwner):
    """Owner of ``stops:pending`` and the sessions' ``turn_stop`` flags."""

    def recheck_run(self, run_id: str, *, at: float) -> None:
        self.redis.zadd(self.keys.stops_pending, {run_id: at})

    def recheck_turn(self, job_id: str, *, at: float) -> None:
        self.redis.zadd(self.keys.stops_pending, {TURN_MEMBER + job_id: at})

    def due(self, *, now: float | None = None, limit: int = 100) -> list[str]:
        """Members whose re-check time has come (run ids, or ``turn:<job id>``)."""
        now = time.time() if now is None else now
        raw = self.redis.zrangebyscore(self.keys.stops_pending, "-inf", now, start=0, num=limit)
        return [as_text(m) for m in raw]

    def postpone(self, member: str, *, at: float) -> None:
        self.redis.zadd(self.keys.stops_pending, {member: at})

    def done(self, member: str) -> None:
        self.redis.zrem(self.keys.stops_pending, member)

    def stop_turn(self, session_key: str, *, ttl: int) -> None:
        self.redis.set(self.keys.turn_stop(session_key), "1", ex=ttl)

    def turn_stop_requested(self, session_key: str) -> bool:
        return bool(self.redis.exists(self.keys.turn_stop(session_key)))

    def clear_turn_stop(self, session_key: str) -> None:
        self.redis.delete(self.keys.turn_stop(session_key))
