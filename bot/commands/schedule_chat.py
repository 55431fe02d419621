"""``/subagents every|schedules|unschedule``: recurring runs from chat.

``/subagents every <interval | 5-field cron> [type] <task>`` makes a schedule in this
thread (admins only unless ``FANBOT_SCHEDULES__WHO=anyone``; at most
``FANBOT_LIMITS__SCHEDULES_PER_USER`` per person, :mod:`bot.runs.quota`); ``schedules`` lists this
thread's; ``unschedule <id>`` removes one. Parsing and rendering are pure; the lifecycle is
:mod:`bot.runs.recurring`.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from bot.commands.registry import subcommand
from bot.commands.router import CommandRequest
from bot.commands.spawn_command import SpawnAsk, leading_flags, parse_type_and_task, words_after
from bot.errors import FanbotError
from bot.runs.naming import Icon
from bot.runs.quota import admit_schedule, schedule_failed, schedule_made, schedule_removed
from bot.runs.recurring import (
    add_schedule,
    may_schedule,
    thread_schedules,
)
from bot.runs.schedule_spec import Every, every_from_text, parse_every
from bot.runs.type_registry import subagent_types
from bot.store.schedules import NewSchedule, Schedule
from bot.text.units import duration, same_utc_day, utc_clock, utc_stamp

EVERY_USAGE = (
    f"`{subcommand('every').spelled}`, e.g. `/subagents every 2h explore "
    "check the build` or `/subagents every 0 9 * * 1-5 summarize open issues` (cron in UTC)"
)


@dataclass(frozen=True, kw_only=True)
class EveryAsk:
    """What ``/subagents every`` asked for."""

    every: Every
    ask: SpawnAsk


def parse_every_command(rest: str, types: Collection[str], *, min_seconds: int) -> EveryAsk | str:
    """The text after ``/subagents every`` -> a request, or the answer saying why not."""
    flags, text = leading_flags(rest.strip())
    if flags:
        shown = flags[0][:24].replace("`", "'")
        return f"I don't know the option `{shown}`. Usage: {EVERY_USAGE}"
    words = text.split()
    every = parse_every(words, min_seconds=min_seconds)
    if isinstance(every, str):
        return f"Can't schedule: {every}.\nUsage: {EVERY_USAGE}"
    spec, used = every
    ask = parse_type_and_task(words_after(text, used), types)
    if isinstance(ask, str):
        return f"Can't schedule: {ask.split(' Usage:')[0]} Usage: {EVERY_USAGE}"
    return EveryAsk(every=spec, ask=ask)


def parse_schedule_id(token: str) -> str | None:
    """``4`` or ``#4`` -> ``"4"``; None when it is not a schedule number (pure)."""
    token = token.strip().removeprefix("#")
    return str(int(token)) if token.isdigit() and token.isascii() and len(token) < 12 else None


def when(t: float, now: float) -> str:
    """``15:40 UTC (in 25m)`` / ``2026-11-24 09:00 UTC (in 17h 20m)`` (pure)."""
    shown = utc_clock(t) if same_utc_day(t, now) else utc_stamp(t, seconds=False)
    return f"{shown} (in {duration(t - now, style='spaced')})" if t >= now else f"{shown} (due now)"


def describe(s: Schedule, now: float) -> str:
    """One schedule as a list line (pure)."""
    task = s.task if len(s.task) <= 80 else s.task[:79] + "…"
    kind = s.subagent_type or "general-purpose"
    fired = f" · fired {s.fired}×" if s.fired else ""
    every = every_from_text(s.every).describe()
    return (
        f"• #{s.schedule_id} · {every} · {kind} · next {when(s.next_time, now)}"
        f" · by {s.requester}{fired}: {task}"
    )


def render_schedules(found: list[Schedule], *, now: float) -> str:
    if not found:
        return "No schedules in this thread. Make one with " + EVERY_USAGE + "."
    lines = [f"*Schedules in this thread* ({len(found)})"]
    lines += [describe(s, now) for s in found]
    return "\n".join(lines)


def handle_every(req: CommandRequest) -> str:
    s = req.deps.settings
    actor = req.actor
    decision = may_schedule(actor, who=s.schedules.who)
    if not decision.allowed:
        return f"I can't make that schedule: {decision.reason}"
    parsed = parse_every_command(
        words_after(req.command.rest, 1),
        subagent_types(s),
        min_seconds=s.schedules.min_interval_seconds,
    )
    if isinstance(parsed, str):
        return parsed
    new = NewSchedule(
        every=parsed.every.text,
        task=parsed.ask.task,
        subagent_type=parsed.ask.subagent_type or "",
        thread=req.inbound.thread,
        session_key=req.session_key,
        requester=actor.qualified,
        agent_id=s.agent_id,
    )
    try:
        token = admit_schedule(req.deps, actor.qualified)
    except FanbotError as exc:
        return f"I can't make that schedule: {exc}"
    try:
        made = add_schedule(req.deps, new)
    except FanbotError as exc:
        schedule_failed(req.deps, actor.qualified, token)
        return f"I can't make that schedule: {exc}"
    schedule_made(req.deps, actor.qualified, token, made.schedule_id)
    kind = made.subagent_type or "general-purpose"
    return (
        f"{Icon.SCHEDULE} Schedule #{made.schedule_id}: {parsed.every.describe()}, first at "
        f"{when(made.next_time, time.time())} — {kind}: {made.task}\n"
        f"Each run announces here. `/subagents unschedule {made.schedule_id}` removes it."
    )


def handle_list(req: CommandRequest) -> str:
    return render_schedules(thread_schedules(req.deps, req.inbound.thread), now=time.time())


def handle_unschedule(req: CommandRequest) -> str:
    args = req.command.args[1:]
    if len(args) != 1:
        return "`/subagents unschedule <id>` takes one schedule number, e.g. `/subagents unschedule 2`."
    schedule_id = parse_schedule_id(args[0])
    shown = args[0][:20].replace("`", "'")
    ours = {s.schedule_id: s for s in thread_schedules(req.deps, req.inbound.thread)}
    found = ours.get(schedule_id) if schedule_id else None
    if found is None:
        return f"No schedule `{shown}` in this thread. `/subagents schedules` lists them."
    decision = may_schedule(req.actor, who=req.deps.settings.schedules.who, owner=found.requester)
    if not decision.allowed:
        return f"I can't remove schedule #{found.schedule_id}: {decision.reason}"
    if not req.deps.schedules.remove(found.schedule_id):
        return f"Schedule #{found.schedule_id} was just removed by someone else."
    schedule_removed(req.deps, found.requester, found.schedule_id)
    return f"{Icon.REMOVED} Removed schedule #{found.schedule_id} ({every_from_text(found.every).describe()}): {found.task}"
