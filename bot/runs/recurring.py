"""Recurring runs: make, list, remove and fire schedules.

Each firing is a normal run (:func:`~bot.runs.spawn.spawn_run`) announcing into the thread
the schedule was made in, its requester being who made it. The maintenance sweep calls
:func:`fire_due`; the store's claim (:mod:`bot.store.schedules`) makes each tick fire once
however many workers sweep, and a tick missed while every worker was down fires once on
the next sweep with the lateness in its announce's notes ("fired 2h late: workers were
down").

Who may add and remove (:func:`may_schedule`, pure): admins only unless
``schedules.who`` is ``anyone``; then anyone adds and removes their own, admins any.
"""

from __future__ import annotations

import logging
import time
import uuid

from bot.deps import Deps
from bot.errors import FanbotError
from bot.runs.access import Actor, Decision
from bot.runs.naming import Icon
from bot.runs.schedule_spec import every_from_text, plan_firing
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.runs.type_registry import subagent_types
from bot.store.schedules import NewSchedule, Schedule, ScheduleStore
from bot.types import Outbound, OutboundKind, ThreadRef

log = logging.getLogger(__name__)


def may_schedule(actor: Actor, *, who: str, owner: str | None = None) -> Decision:
    """Whether ``actor`` may add a schedule (``owner`` None) or remove ``owner``'s (pure)."""
    if actor.is_admin:
        return Decision(allowed=True)
    if who != "anyone":
        return Decision(
            allowed=False, reason="only an admin may manage schedules here (FANBOT_ADMINS)."
        )
    if owner is not None and owner != actor.qualified:
        return Decision(
            allowed=False, reason="only an admin or the person who made it may remove it."
        )
    return Decision(allowed=True)


def add_schedule(deps: Deps, new: NewSchedule, *, now: float | None = None) -> Schedule:
    """Record ``new``; its first tick is the next one after now.

    Raises:
        FanbotError: its type is not configured.
    """
    now = time.time() if now is None else now
    types = subagent_types(deps.settings)
    if new.subagent_type and new.subagent_type not in types:
        raise FanbotError(f"unknown subagent type {new.subagent_type!r}; known: {', '.join(types)}")
    every = every_from_text(new.every)
    return deps.schedules.add(new, next_at=every.next_after(now, anchor=now), now=now)


def thread_schedules(deps: Deps, thread: ThreadRef) -> list[Schedule]:
    """The schedules made in ``thread`` (a channel-level command: in its whole chat)."""
    found = deps.schedules.all()
    if thread.thread is None:
        return [s for s in found if _same_chat(s.thread, thread)]
    return [s for s in found if s.thread == thread]


def _same_chat(a: ThreadRef, b: ThreadRef) -> bool:
    return (a.platform, a.account, a.chat) == (b.platform, b.account, b.chat)


def fire_due(deps: Deps, *, now: float | None = None) -> list[str]:
    """Fire every schedule whose tick has come and this caller claims, then every tick a
    sweep fired but never finished (its process died); returns the run ids started."""
    now = time.time() if now is None else now
    store = deps.schedules
    late_after = deps.settings.schedules.late_after_seconds
    started: list[str] = []
    for schedule in store.due(now=now):
        every = every_from_text(schedule.every)
        firing = plan_firing(
            every,
            due=schedule.next_time,
            now=now,
            anchor=schedule.created_at,
            late_after=late_after,
        )
        note = firing.late_note()
        if not store.claim(schedule, next_at=firing.next_at, now=now, note=note):
            continue  # another worker fired this tick
        if note:
            log.warning("schedule #%s %s", schedule.schedule_id, note)
        started += _fire(deps, store, schedule, schedule.next_at, note)
    for schedule in store.unfinished(now=now, older_than=UNFINISHED_AFTER_SECONDS):
        if store.retake(schedule, now=now):
            log.warning("schedule #%s: starting the run of a firing that did not finish",
                        schedule.schedule_id)  # fmt: skip
            started += _fire(deps, store, schedule, schedule.pending, schedule.pending_note)
    return started


# A firing's process has this long to record its run before another sweep takes it over
# (a spawn takes milliseconds; a sweep runs every few seconds).
UNFINISHED_AFTER_SECONDS = 60.0


def tick_run_id(schedule_id: str, tick: str) -> str:
    """The run id of one tick of one schedule: the same however often it is retried."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fanbot:schedule:{schedule_id}:{tick}").hex


def _fire(deps: Deps, store: ScheduleStore, schedule: Schedule, tick: str, note: str) -> list[str]:
    run_id = tick_run_id(schedule.schedule_id, tick)
    if deps.runs.get(run_id) is None:  # else an earlier try recorded it and then died
        run_id = _start(deps, schedule, note, run_id=run_id, tick=tick)
    store.done(schedule.schedule_id, tick, run_id)
    return [run_id] if run_id else []


def _start(deps: Deps, schedule: Schedule, note: str, *, run_id: str, tick: str) -> str:
    request = SpawnRequest(
        task=schedule.task,
        session_key=schedule.session_key,
        thread=schedule.thread,
        requester=schedule.requester,
        agent_id=schedule.agent_id,
        subagent_type=schedule.subagent_type or None,
        notes=(f"schedule #{schedule.schedule_id} {note}",) if note else (),
        run_id=run_id,
    )
    try:
        return spawn_run(deps, request, known_models=lambda: None).run_id
    except FanbotError as exc:  # a type removed, a budget spent: say so where it was made
        log.warning("schedule #%s did not start: %s", schedule.schedule_id, exc)
        _tell(
            deps,
            schedule,
            tick,
            f"{Icon.SCHEDULE} Schedule #{schedule.schedule_id} did not start a run: {exc}",
        )
        return ""


def _tell(deps: Deps, schedule: Schedule, tick: str, text: str) -> None:
    notice = Outbound(
        thread=schedule.thread,
        text=text,
        kind=OutboundKind.REPLY,
        idempotency_key=f"schedule:{schedule.schedule_id}:{tick}",
    )
    deps.outbox.put(notice)
