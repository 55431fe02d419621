"""What becomes of a run whose worker was lost: it goes on in a new attempt, or ends.

Every noticer of a dead worker calls :func:`recover_run` with the job it saw die: the
launcher (its worker process exited), the fork pool's horse monitor (the horse died) and
the reaper (the run's heartbeat lapsed: its host died). The decision is the recovery
script's (:mod:`bot.store.recovery`), fenced on that job, so a death noticed twice resumes
the run once. The new attempt goes on from the run's last completed step
(:class:`bot.agent.subagent.SubagentBody`, ``recovered``; docs/architecture.md, "Resume
after a crash").
"""

from __future__ import annotations

import logging

from bot.deps import Deps
from bot.observe import record as observed
from bot.runs.finalize import finalize_run
from bot.runs.line import slot_job
from bot.runs.naming import Icon, run_title
from bot.runs.type_registry import subagent_types
from bot.store.jobs import SUBAGENTS_QUEUE, RunJobSpec
from bot.store.progress import ProgressEvent
from bot.store.recovery import Recovery, Verdict
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)


def resumed_line(resumes: int) -> str:
    """The status card's line of a run that went on after a lost worker (pure)."""
    return f"{Icon.RESUMED} resumed after a worker was lost ({resumes}×)"


def exhausted_note(deaths: int) -> str:
    """The note of a run not resumed again (pure)."""
    return f"its worker died {deaths} time{'' if deaths == 1 else 's'}; not resumed again"


def recover_run(deps: Deps, run_id: str, *, dead_job: str, why: str) -> Recovery:
    """The run ``run_id`` lost the worker executing it as ``dead_job`` ("" = whichever
    job executes it): resume it, or end it (``resume: false`` type, stopped, too many
    deaths). ``why``: how the attempt ended, kept for ``/subagents info``."""
    record = deps.runs.get(run_id)
    if record is None or record.status is not RunStatus.RUNNING or record.parked_at:
        return Recovery(verdict=Verdict.NONE)
    if dead_job and record.executing_job != dead_job:
        return Recovery(verdict=Verdict.NONE)  # resumed already, by whoever noticed first
    sub_type = subagent_types(deps.settings).get(record.subagent_type)
    if sub_type is not None and not sub_type.resume:
        ended = finalize_run(deps, run_id, status=RunStatus.UNKNOWN, notes=why)
        if ended:
            observed.resumed(deps, "run", "not_resumable")
        return Recovery(verdict=Verdict.NONE)
    got = deps.recovery.recover(
        run_id,
        deps.jobs.recovery_job(_spec(deps, record), attempt=record.attempt + 1),
        deps.jobs.queue(SUBAGENTS_QUEUE),
        dead_job=dead_job,
        max_resumes=deps.settings.subagents.max_resumes,
        why=why,
    )
    if got.verdict is Verdict.RESUMED:
        line = resumed_line(got.attempt - 1)
        deps.progress.put(ProgressEvent(run_id=run_id, thread=record.thread, text=line))
        log.warning("run %s resumed in attempt %d (%s)", run_id, got.attempt, why)
        observed.resumed(deps, "run", "resumed")
    elif got.verdict is Verdict.STOPPED:
        note = "stopped on request (its worker was lost meanwhile)"
        if finalize_run(deps, run_id, status=RunStatus.STOPPED, notes=note):
            observed.resumed(deps, "run", "stopped")
    elif got.verdict is Verdict.EXHAUSTED:
        note = exhausted_note(got.attempt)
        log.warning("run %s not resumed again: %s (%s)", run_id, note, why)
        if finalize_run(deps, run_id, status=RunStatus.UNKNOWN, notes=note):
            observed.resumed(deps, "run", "exhausted")
    return got


def _spec(deps: Deps, record: RunRecord) -> RunJobSpec:
    title = run_title(record, noun="subagent", name="none")
    return slot_job(
        deps.settings,
        record,
        run_id=record.run_id,
        description=f"{title} goes on after its worker was lost",
    )
