"""Inbound de-duplication: each platform event gets one turn, whatever is redelivered.

A delivery first *claims* the event: ``SET NX`` of ``claim:<token>:<job id>:<time>`` for
``gateway.dedupe_ttl_seconds``, naming the turn job it is about to enqueue. It does its work
(answers a command, or enqueues that job), then marks the event ``done``. So a later
delivery of the same event finds one of:

* ``done`` — a duplicate;
* its own claim (its ``SET`` went through, the reply was lost and the client retried);
* another delivery's claim whose job exists — that delivery died after enqueueing: a
  duplicate;
* another delivery's claim, no job, younger than the hold time — still in progress: retry
  later;
* the same, older than the hold time — that delivery died before enqueueing: take the
  claim over (compare-and-set) and handle the event.

Job ids sort by the time of the claim, so a session's turns keep their order in RQ's
rate-limit lane (it scores in whole seconds and breaks ties by job id).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.store import as_text
from bot.store.owner import Lua, RedisOwner

DONE = "done"
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
"""


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """What a delivery found when it claimed its event.

    Attributes:
        mine: The claim is this delivery's: handle the event with ``job_id``.
        done: The event was handled already.
        job_id: The turn job the claim names (this delivery's, or the other one's).
        age: Seconds since the other delivery claimed it.
        value: The other delivery's claim, for :meth:`Dedupe.take_over`.
    """

    mine: bool = False
    done: bool = False
    job_id: str = ""
    age: float = 0.0
    value: str = ""


class Dedupe(RedisOwner):
    """Owner of the ``dedupe:{platform}:{eventId}`` markers."""

    _take_over = Lua(_TAKE_OVER)

    @staticmethod
    def claim_value(token: str, job_id: str, *, now: float | None = None) -> str:
        return f"claim:{token}:{job_id}:{time.time() if now is None else now:.3f}"

    def claim(self, platform: str, event_id: str, *, value: str, ttl: int) -> Claimed:
        """Claim ``event_id`` with ``value`` (from :meth:`claim_value`)."""
        key = self.keys.dedupe(platform, event_id)
        if self.redis.set(key, value, nx=True, ex=ttl):
            return Claimed(mine=True, job_id=_job_of(value))
        found = self.redis.get(key)
        if found is None:  # it expired between the two calls
            return self.claim(platform, event_id, value=value, ttl=ttl)
        text = as_text(found)
        if text == value:  # our SET went through; its reply was lost and the client retried
            return Claimed(mine=True, job_id=_job_of(value))
        if not text.startswith("claim:"):
            return Claimed(done=True)
        return Claimed(job_id=_job_of(text), age=time.time() - _time_of(text), value=text)

    def take_over(self, platform: str, event_id: str, *, old: str, new: str, ttl: int) -> bool:
        """Replace a dead delivery's claim ``old`` by ``new``; False if it changed meanwhile."""
        key = self.keys.dedupe(platform, event_id)
        return bool(self._take_over(keys=[key], args=[old, new, ttl]))

    def done(self, platform: str, event_id: str, *, ttl: int) -> None:
        """Mark ``event_id`` handled for ``ttl`` seconds."""
        self.redis.set(self.keys.dedupe(platform, event_id), DONE, ex=ttl)


def _job_of(value: str) -> str:
    parts = value.split(":")
    return parts[2] if len(parts) >= 4 else ""


def _time_of(value: str) -> float:
    try:
        return float(value.rsplit(":", 1)[-1])
    except ValueError:
        return 0.0
