"""Stall detection, separate from the wall clock (the run's soft deadline).

A run shows signs of life: every chunk its model streams, every tool call starting and
ending, every step (:meth:`bot.steps.Meter.touch`). A run quiet for
``subagents.stall_seconds`` (``stall_tool_seconds`` while a tool call is in flight) gets
``stall_grace_seconds`` more, with a line on its status card ("no progress for 5m00s;
ending in 30s unless it moves"); still quiet after that, it ends ``timeout`` with its
partial result and a note saying it stalled, for how long, and what it did last. A slow
run whose tokens trickle in is never ended by this.

The frame (:mod:`bot.runs.execute`) runs a watchdog thread beside the body; the same thread
refreshes the run's heartbeat (one thread per run, not two). The decision is
:func:`judge` (pure); the thread acts on it:

1. the verdict is kept, and the body's next checkpoint raises :class:`RunStalled` (a tool
   loop between steps, a compiled runnable's wait), so the run ends through its own frame;
2. a body blocked where no checkpoint comes (a model call that never yields a token) is
   ended by the watchdog itself after :data:`SETTLE_SECONDS`: it finalizes the run
   ``timeout`` with the same note and partial result, then hard-stops the job as
   ``/subagents stop`` does (RQ's stop command, re-sent by the maintenance sweep).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from bot.config import SubagentSettings
from bot.deps import Deps
from bot.errors import RunStalled, RunStopped
from bot.runs.finalize import finalize_run
from bot.runs.progress_lines import step_event
from bot.steps import LoopControl, LoopResult, Meter, RunBody
from bot.supervise import abort
from bot.text.units import duration
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)

SETTLE_SECONDS = 3.0
"""How long a stalled body may take to reach a checkpoint before the watchdog ends it."""


class Stall(enum.StrEnum):
    """How a run's silence stands."""

    MOVING = "moving"
    GRACE = "grace"
    STALLED = "stalled"


@dataclass(frozen=True, kw_only=True)
class StallLimits:
    """Attributes:
    quiet: Seconds without a sign of life that make a run stalled.
    in_tool: The same while a tool call is in flight.
    grace: Seconds a stalled run gets before it ends.
    """

    quiet: float
    in_tool: float
    grace: float

    @classmethod
    def of(cls, sub: SubagentSettings) -> StallLimits:
        return cls(
            quiet=sub.stall_seconds, in_tool=sub.stall_tool_seconds, grace=sub.stall_grace_seconds
        )

    def limit(self, *, in_tool: bool) -> float:
        return self.in_tool if in_tool else self.quiet


def judge(*, quiet_for: float, in_tool: bool, limits: StallLimits) -> Stall:
    """Where a run quiet for ``quiet_for`` seconds stands (pure)."""
    limit = limits.limit(in_tool=in_tool)
    if quiet_for < limit:
        return Stall.MOVING
    if quiet_for < limit + limits.grace:
        return Stall.GRACE
    return Stall.STALLED


def grace_text(*, quiet_for: float, in_tool: bool, limits: StallLimits) -> str:
    """The status card's line in the grace period (pure)."""
    left = limits.limit(in_tool=in_tool) + limits.grace - quiet_for
    return (
        f"no progress for {duration(quiet_for)}; "
        f"ending in {duration(max(0.0, left))} unless it moves"
    )


def stall_note(*, quiet_for: float, activity: str, tool: str, limits: StallLimits) -> str:
    """The announce's note for a stalled run (pure)."""
    inside = f" inside tool {tool}" if tool else ""
    return (
        f"stalled: no model output and no tool event for {duration(quiet_for)}{inside} "
        f"(last activity: {activity}; limit {duration(limits.limit(in_tool=bool(tool)))} "
        f"+ {duration(limits.grace)} grace)"
    )


@dataclass(kw_only=True)
class StallWatch:
    """The watchdog of one run (see the module docstring)."""

    deps: Deps
    record: RunRecord
    meter: Meter
    limits: StallLimits
    note: str = ""
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    next_beat: float  # when the heartbeat is refreshed next (time.monotonic())
    superseded: bool = False
    """A later attempt executes the run: this one was taken for lost (its heartbeat
    lapsed) and must end without a trace (bot.store.recovery)."""
    aborter: abort.Abort | None = None
    """The run's abort (threads pool): a superseded attempt is cut short through it."""

    def check(self) -> None:
        """Raise :class:`RunStalled` once the watchdog has judged the run stalled, and
        :class:`RunStopped` once a later attempt took the run over."""
        if self.superseded:
            raise RunStopped("a later attempt executes the run")
        if self.note:
            raise RunStalled(self.note)

    def guard(self, body: RunBody) -> RunBody:
        """``body`` with this watch in its checkpoint, and its progress counted as life."""

        def guarded(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
            def checkpoint() -> None:
                self.check()
                control.checkpoint()

            def progress(text: str) -> None:
                meter.touch(text)
                control.progress(text)

            watched = dataclasses.replace(control, checkpoint=checkpoint, progress=progress)
            return body(record, control=watched, meter=meter)

        return guarded

    def run(self) -> None:
        period = max(0.05, min(1.0, self.limits.quiet / 5, self.limits.in_tool / 5))
        warned = False
        while not self._wait(period):
            if self.superseded:
                return
            meter = self.meter
            quiet_for = time.monotonic() - meter.last_activity
            verdict = judge(quiet_for=quiet_for, in_tool=bool(meter.in_tool), limits=self.limits)
            if verdict is Stall.MOVING:
                warned = False
            elif verdict is Stall.GRACE and not warned:
                warned = True
                self._say(
                    grace_text(quiet_for=quiet_for, in_tool=bool(meter.in_tool), limits=self.limits)
                )
            elif verdict is Stall.STALLED:
                self.note = stall_note(
                    quiet_for=quiet_for,
                    activity=meter.activity,
                    tool=meter.in_tool,
                    limits=self.limits,
                )
                log.warning("run %s stalled: %s", self.record.run_id, self.note)
                if not self._wait(SETTLE_SECONDS):
                    self._end()
                return

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, refreshing the heartbeat whenever it is due; True once the
        body has ended (the watch stops)."""
        until = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if now >= self.next_beat:
                self.next_beat = now + self.deps.settings.subagents.heartbeat_seconds
                self._beat()
            left = until - now
            if left <= 0:
                return self.done.is_set()
            if self.done.wait(max(0.0, min(left, self.next_beat - now))):
                return True

    def _beat(self) -> None:
        record = self.record
        try:
            ttl = self.deps.settings.subagents.stale_after_seconds
            if self.deps.runs.beat(record.run_id, ttl=ttl, executor=record.executor):
                return
        except Exception:  # a Redis blip must not end the watch; the next beat retries
            log.warning("heartbeat for %s failed", record.run_id, exc_info=True)
            return
        # Taken for lost while it lived on (starved past stale_after_seconds): the run
        # goes on in a later attempt, so this one stops without ending or parking it.
        self.superseded = True
        log.warning("run %s went on in another attempt; job %s stops", record.run_id,
                    record.executor)  # fmt: skip
        if self.aborter is not None:
            self.aborter.abort("a later attempt executes the run")

    def _say(self, text: str) -> None:
        try:
            self.deps.progress.put(step_event(self.record, self.meter, text))
        except Exception:  # a status line is not worth ending the watch
            log.warning("stall warning for %s not shown", self.record.run_id, exc_info=True)

    def _end(self) -> None:
        """The body did not reach a checkpoint: end the run here and kill its job."""
        deps, record, meter = self.deps, self.record, self.meter
        ended = finalize_run(
            deps,
            record.run_id,
            status=RunStatus.TIMEOUT,
            result=meter.last_text,
            notes=self.note,
            usage=meter.usage,
            executor=record.executor,
        )
        if ended:
            grace = deps.settings.subagents.hard_kill_grace_seconds
            deps.stops.recheck_run(record.run_id, at=time.time() + grace)
            deps.jobs.send_stop(record.executing_job)
            log.warning("run %s blocked while stalled; ended it and stopped its job", record.run_id)


@contextmanager
def stall_watch(deps: Deps, record: RunRecord, meter: Meter) -> Iterator[StallWatch]:
    """Watch ``record``'s run for stalls while the body runs, and refresh its heartbeat
    every ``heartbeat_seconds`` (the run's start set the first): one daemon thread."""
    sub = deps.settings.subagents
    watch = StallWatch(
        deps=deps,
        record=record,
        meter=meter,
        limits=StallLimits.of(sub),
        next_beat=time.monotonic() + sub.heartbeat_seconds,
        aborter=abort.current(),
    )
    thread = threading.Thread(target=watch.run, name=f"watch-{record.run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.done.set()
        thread.join(timeout=SETTLE_SECONDS + 5)
