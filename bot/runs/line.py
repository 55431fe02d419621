"""The line for subagent slots, as the lifecycle uses it: admit the next runs when a slot
frees, and tell each waiting run's status card its place (``queued · #3 in line``).

Who gets a slot is decided in Redis (:mod:`bot.store.fair`); this module only puts a
recorded run in line (:func:`enqueue_run`: a spawn, a follow-up, an approved held spawn),
calls the admission after a terminal transition and renders the places it reads.
"""

from __future__ import annotations

import logging

from bot.config import Settings
from bot.deps import Deps
from bot.runs.naming import run_title
from bot.store.jobs import RunJobSpec
from bot.types import RunRecord

log = logging.getLogger(__name__)

MAX_PLACES = 50
"""Status cards told their place after each change (the rest learn it as the line moves)."""


def place_text(place: int) -> str:
    """``queued · #3 in line`` (pure); #1 starts next."""
    return f"queued · #{place} in line"


def slot_job(settings: Settings, record: RunRecord, *, run_id: str, description: str) -> RunJobSpec:
    """The job that runs ``record`` (or resumes it) once the line gives it a slot: it waits
    in its session's line, and its hard timeout is the run's plus the job grace (none, RQ's
    -1, for a run without a deadline)."""
    sub = settings.subagents
    return RunJobSpec(
        run_id=run_id,
        timeout=record.timeout_s + sub.job_grace_seconds if record.timeout_s > 0 else -1,
        max_concurrent=sub.max_concurrent,
        description=description,
        session_key=record.session_key,
        per_session=sub.max_concurrent_per_session,
    )


def enqueue_run(deps: Deps, record: RunRecord) -> None:
    """Put a recorded run in its session's line for a subagent slot (it starts at once
    when one is free); a run that must wait is told its place."""
    admitted = deps.jobs.enqueue_run(
        slot_job(
            deps.settings,
            record,
            run_id=record.job_id,
            description=run_title(record, noun="subagent", name="brief"),
        )
    )
    if record.job_id not in admitted:
        show_places(deps, from_run=record.job_id)


def admit_next(deps: Deps) -> list[str]:
    """Give free slots to waiting runs (fairly, in Redis); returns the run ids admitted."""
    sub = deps.settings.subagents
    return deps.jobs.refill_subagent_slots(sub.max_concurrent, sub.max_concurrent_per_session)


def show_places(deps: Deps, *, from_run: str | None = None) -> None:
    """Put each waiting run's place in line on its status card, or only from ``from_run``
    on (a run just put in line moves only those behind it). Best effort: a failure is
    logged, and the next change of the line shows the places again."""
    try:
        line = deps.jobs.subagent_line()
        start = line.index(from_run) if from_run in line else 0
        line = line[start : start + MAX_PLACES]
        # One script for them all; a run that started meanwhile is left to its own events.
        deps.runs.show_waiting(
            (run_id, place_text(place)) for place, run_id in enumerate(line, start + 1)
        )
    except Exception:
        log.warning("cannot show the places in line", exc_info=True)


def after_slot_freed(deps: Deps, *, left_line: bool = True) -> None:
    """Admit the next runs and refresh the places; a failure is logged (the maintenance
    sweep admits on its next pass). The places are shown again only if the line moved:
    a run was admitted, or the run that ended may have left it (``left_line``: it had not
    started; a run that held a slot was in no line)."""
    admitted: list[str] = []
    try:
        admitted = admit_next(deps)
    except Exception:
        log.warning("admitting the next subagent runs failed", exc_info=True)
    if admitted or left_line:
        show_places(deps)
