"""Bounded runs and schedules per person and thread: the one check every spawn passes.

:func:`admit_spawn` is called by :func:`bot.runs.spawn.spawn_run` for every run, whoever
asks for it (the model's ``sessions_spawn``, a person's ``/subagents spawn``, a schedule's
firing), so one place decides (docs/architecture.md "Bounded use"):

* spawns per turn (``subagents.max_spawns_per_turn``): a model's turn counts the spawns it
  made; a person's own ``/subagents spawn`` commands in one minute count as one turn;
* runs waiting or running per requester (``limits.runs_per_user``) and per session
  (``limits.runs_per_session``): each run takes a place in both (:mod:`bot.store.usage`),
  given back when it ends.

:func:`admit_schedule` bounds the schedules a person has (``limits.schedules_per_user``).
Admins (``FANBOT_ADMINS``) are exempt from the per-person and per-thread places; the
spawns-per-turn rule binds everyone.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from bot.deps import Deps
from bot.errors import FanbotError, SpawnRejected
from bot.store.usage import WINDOW_SECONDS, Place

PLACE_GRACE_SECONDS = 30.0
"""A place taken this recently counts even before the run or schedule holding it is
recorded (spawning takes milliseconds)."""

RUN_PLACES_TTL = 7 * 86_400
"""A person's or session's run places expire this long after their last spawn."""

BY_COMMAND: None = None
"""``spawned_in_turn`` of a person's own ``/subagents spawn``: their spawns in the current
minute are the turn."""


@dataclass(frozen=True, kw_only=True)
class SpawnQuota:
    """Who a spawn counts against."""

    requester: str
    session_key: str
    run_id: str
    spawned_in_turn: int | None = 0
    """Spawns the asking turn made before this one; :data:`BY_COMMAND`: a chat command."""


def run_places(deps: Deps, *, requester: str, session_key: str) -> list[Place]:
    """The place sets a run of ``requester`` in ``session_key`` takes (none for an admin)."""
    s = deps.settings
    if requester in s.admins:
        return []
    keys = deps.keys
    return [
        Place(key=keys.limit_places("runs", f"user|{requester}"), limit=s.limits.runs_per_user),
        Place(
            key=keys.limit_places("runs", f"session|{session_key}"),
            limit=s.limits.runs_per_session,
        ),
    ]


def admit_spawn(deps: Deps, quota: SpawnQuota, *, now: float | None = None) -> None:
    """Take the places of one new run, or refuse it.

    Raises:
        SpawnRejected: a limit is reached; the message says which and what to do.
    """
    s = deps.settings
    now = time.time() if now is None else now
    per_turn = s.subagents.max_spawns_per_turn
    if quota.spawned_in_turn is not None and quota.spawned_in_turn >= per_turn:
        raise SpawnRejected(f"at most {per_turn} spawns per turn")
    places = run_places(deps, requester=quota.requester, session_key=quota.session_key)
    full = deps.usage.reserve(
        places,
        quota.run_id,
        live="runs",
        now=now,
        grace=PLACE_GRACE_SECONDS,
        ttl=RUN_PLACES_TTL,
    )
    if full == 0:
        raise SpawnRejected(
            f"you already have {s.limits.runs_per_user} runs waiting or running "
            "(FANBOT_LIMITS__RUNS_PER_USER); wait for one to end or stop one"
        )
    if full == 1:
        raise SpawnRejected(
            f"this thread already has {s.limits.runs_per_session} runs waiting or running "
            "(FANBOT_LIMITS__RUNS_PER_SESSION); wait for one to end or stop one"
        )
    if quota.spawned_in_turn is BY_COMMAND:
        minute = int(now // WINDOW_SECONDS)
        hit = deps.usage.hit([(f"spawns|{quota.requester}", per_turn)], window=minute)
        if hit.over is not None:
            deps.usage.release(places, quota.run_id)
            wait = max(1, int((minute + 1) * WINDOW_SECONDS - now + 0.999))
            raise SpawnRejected(
                f"at most {per_turn} spawns per turn, and your `/subagents spawn` commands "
                f"in one minute count as one turn; try again in {wait} s"
            )


def schedule_places(deps: Deps, requester: str) -> list[Place]:
    s = deps.settings
    if requester in s.admins:
        return []
    key = deps.keys.limit_places("schedules", f"user|{requester}")
    return [Place(key=key, limit=s.limits.schedules_per_user)]


def admit_schedule(deps: Deps, requester: str, *, now: float | None = None) -> str:
    """Take a place for one new schedule of ``requester``; returns the token holding it
    until :func:`schedule_made` names the schedule (or :func:`schedule_failed` frees it).

    Raises:
        FanbotError: ``requester`` has ``limits.schedules_per_user`` schedules already.
    """
    now = time.time() if now is None else now
    token = f"new:{uuid.uuid4().hex}"
    places = schedule_places(deps, requester)
    full = deps.usage.reserve(places, token, live="schedules", now=now, grace=PLACE_GRACE_SECONDS)
    if full is not None:
        limit = deps.settings.limits.schedules_per_user
        raise FanbotError(
            f"you already have {limit} schedules (FANBOT_LIMITS__SCHEDULES_PER_USER); "
            "remove one with `/subagents unschedule <id>` first"
        )
    return token


def schedule_made(deps: Deps, requester: str, token: str, schedule_id: str) -> None:
    deps.usage.rename(schedule_places(deps, requester), token, schedule_id, now=time.time())


def schedule_failed(deps: Deps, requester: str, token: str) -> None:
    deps.usage.release(schedule_places(deps, requester), token)


def schedule_removed(deps: Deps, requester: str, schedule_id: str) -> None:
    """Free the place of a removed schedule now (else the next check frees it once its
    grace has passed)."""
    deps.usage.release(schedule_places(deps, requester), schedule_id)
