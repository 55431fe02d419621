"""A run that holds the threads pool's process: its thread burning a core for long.

In the threads pool (:mod:`workers.threaded`) runs share one process and its GIL. A run
spends its life waiting (the model, a tool, Redis), so they share it well, until one runs
CPU-bound Python for a while (a huge regex, a parse, a runaway loop in a compiled type):
then every other run of the process waits for the GIL. Nothing else notices: the run is
not stalled (:mod:`bot.runs.stall`), it is busy.

The worker's control loop calls :meth:`HogWatch.tick` every half second with its run
threads (:class:`Watched`). Each tick samples each thread's CPU time from
``/proc/self/task/<tid>/stat`` (:class:`ThreadCpu`), and :class:`HogJudge` (pure: samples
in, findings out) flags a run whose thread used at least ``share`` of one core over the
last ``window`` seconds (:class:`HogLimits`: 80 % over 10 s). A flagged run is reported
once, until it falls under ``calm`` (50 %) over a window:

- a WARNING naming the job (and run), its share of a core, for how long, and where its
  thread is at that moment (its innermost frame, and the innermost one of fanbot's own
  code: one look at ``sys._current_frames()``, only when a run is flagged);
- for a subagent run, a line on its status card: "⚠️ busy on the CPU for 10s; other runs
  in this worker wait" (:func:`hog_text`).

It only reports: a busy run is not wrong, and its stop still works as for any run.

Why CPU time and not the Python stack: a thread whose innermost frame stays the same
might be computing or might be blocked (a socket read, a lock, ``time.sleep``: the frame
above the C call does not change either way); telling them apart from the frame would
take a list of "blocking" functions that is never complete. The thread's CPU time says
exactly whether it is using the core; the stack is used only to say where.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from bot.deps import Deps
from bot.runs.naming import Icon
from bot.store.progress import ProgressEvent
from bot.text.units import duration

log = logging.getLogger("fanbot.worker")

OWN_CODE = ("bot.", "workers.", "adapters.")
"""Module prefixes of fanbot's own code (the frame a report names besides the innermost)."""


@dataclass(frozen=True, kw_only=True)
class Watched:
    """One run thread of the worker.

    Attributes:
        tid: The thread's kernel id (``threading.Thread.native_id``).
        job_id: Its RQ job.
        run_id: Its subagent run, if it is one (a main-agent turn has no status card).
        ident: ``threading.Thread.ident``, to say where the thread is when flagged.
    """

    tid: int
    job_id: str
    run_id: str | None = None
    ident: int | None = None


class RunThread(Protocol):
    """What :meth:`HogWatch.tick_runs` needs of a worker's run (``workers.threaded._Run``)."""

    @property
    def job(self) -> Any: ...

    @property
    def thread(self) -> threading.Thread | None: ...


@dataclass(frozen=True, kw_only=True)
class HogLimits:
    """Attributes:
    share: Of one core, over ``window``, that flags a run (0.8: 80 %).
    window: Seconds the share is measured over.
    calm: A flagged run is reported again only after its share fell under this.
    """

    share: float = 0.8
    window: float = 10.0
    calm: float = 0.5


class Verdict(enum.StrEnum):
    HOGGING = "hogging"
    CALM = "calm"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A change in how a watched run uses the CPU.

    Attributes:
        run: The run.
        verdict: HOGGING (newly over ``share``) or CALM (back under ``calm``).
        share: Of one core, over ``span``.
        span: Seconds measured (``window``, or a little more).
    """

    run: Watched
    verdict: Verdict
    share: float
    span: float


@dataclass
class _Track:
    samples: collections.deque[tuple[float, float]] = dataclasses.field(
        default_factory=collections.deque
    )
    hogging: bool = False


class HogJudge:
    """Which runs hold the CPU, from samples of their CPU time (pure: no clock, no I/O)."""

    def __init__(self, limits: HogLimits) -> None:
        self.limits = limits
        self._tracks: dict[Watched, _Track] = {}

    def observe(self, now: float, cpu: Mapping[Watched, float]) -> list[Finding]:
        """Take one sample per run (``cpu``: its thread's CPU seconds so far, at ``now``
        seconds); the runs whose verdict changed. A run missing from ``cpu`` has ended and
        is forgotten."""
        window = self.limits.window
        found: list[Finding] = []
        for run, used in cpu.items():
            track = self._tracks.setdefault(run, _Track())
            samples = track.samples
            samples.append((now, used))
            while len(samples) >= 2 and samples[1][0] <= now - window:
                samples.popleft()  # keep one sample at or before the window's start
            start, used_then = samples[0]
            span = now - start
            if span < window:
                continue  # not watched for a whole window yet
            share = max(0.0, used - used_then) / span
            if not track.hogging and share >= self.limits.share:
                track.hogging = True
                found.append(Finding(run=run, verdict=Verdict.HOGGING, share=share, span=span))
            elif track.hogging and share < self.limits.calm:
                track.hogging = False
                found.append(Finding(run=run, verdict=Verdict.CALM, share=share, span=span))
        for gone in self._tracks.keys() - cpu.keys():
            del self._tracks[gone]
        return found


class ThreadCpu:
    """CPU seconds (user + system) of this process's threads, from
    ``/proc/self/task/<tid>/stat``."""

    def __init__(self) -> None:
        self.ticks = os.sysconf("SC_CLK_TCK")

    def __call__(self, tid: int) -> float | None:
        """The thread's CPU seconds so far; None once it has ended (or no /proc)."""
        try:
            fd = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
        except OSError:
            return None
        try:
            raw = os.read(fd, 4096)
        except OSError:
            return None
        finally:
            os.close(fd)
        return cpu_seconds(raw, self.ticks)


def cpu_seconds(stat: bytes, ticks: float) -> float | None:
    """utime + stime of a ``/proc/<pid>/task/<tid>/stat`` line, in seconds (pure).

    The thread's name (field 2) is in parentheses and may hold spaces and parentheses
    itself: the fields are counted from the last ``)``.
    """
    _, paren, rest = stat.rpartition(b")")
    fields = rest.split()
    if not paren or len(fields) < 13:
        return None
    try:  # after the name: state(3) … utime(14) stime(15)
        return (int(fields[11]) + int(fields[12])) / ticks
    except ValueError:
        return None


def hog_text(span: float) -> str:
    """The status card's line for a run holding the CPU (pure)."""
    return f"{Icon.WARNING} busy on the CPU for {duration(span)}; other runs in this worker wait"


def where(frame: FrameType | None) -> str:
    """``at json.decoder:353 in raw_decode, from bot.agent.loop:120 in run``: the innermost
    frame, and the innermost of fanbot's own code when that is another ("" for none)."""
    if frame is None:
        return ""
    said = f"at {_frame(frame)}"
    own: FrameType | None = frame
    while own is not None and not str(own.f_globals.get("__name__", "")).startswith(OWN_CODE):
        own = own.f_back
    if own is not None and own is not frame:
        said += f", from {_frame(own)}"
    return said


def _frame(frame: FrameType) -> str:
    module = frame.f_globals.get("__name__", "?")
    return f"{module}:{frame.f_lineno} in {frame.f_code.co_name}"


class HogWatch:
    """The worker's watch on its run threads (see the module docstring).

    Args:
        deps: Where flagged subagent runs are looked up and their cards told.
        limits: What counts as holding the CPU.
        clock: Seconds, monotonic (tests pass their own).
        cpu_of: A thread's CPU seconds by its tid (tests pass their own).
    """

    def __init__(
        self,
        deps: Deps,
        *,
        limits: HogLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        cpu_of: Callable[[int], float | None] | None = None,
    ) -> None:
        self.deps = deps
        self.judge = HogJudge(limits or HogLimits())
        self.clock = clock
        self.cpu_of = cpu_of or ThreadCpu()

    def tick(self, runs: Iterable[Watched]) -> list[Finding]:
        """Sample ``runs`` now and report the changes (call it every half second or so)."""
        now = self.clock()
        cpu: dict[Watched, float] = {}
        for run in runs:
            used = self.cpu_of(run.tid)
            if used is not None:
                cpu[run] = used
        found = self.judge.observe(now, cpu)
        for finding in found:
            try:
                self._report(finding)
            except Exception:  # a report is not worth the control loop
                log.warning("could not report job %s's CPU use", finding.run.job_id, exc_info=True)
        return found

    def tick_runs(self, runs: Iterable[RunThread]) -> list[Finding]:
        """:meth:`tick` with a worker's runs (those whose thread has started)."""
        return self.tick(
            Watched(
                tid=run.thread.native_id,
                job_id=run.job.id,
                run_id=self.deps.jobs.current_run_id(run.job),
                ident=run.thread.ident,
            )
            for run in runs
            if run.thread is not None and run.thread.native_id is not None
        )

    def _report(self, finding: Finding) -> None:
        run = finding.run
        who = f"job {run.job_id}" + (f" (run {run.run_id})" if run.run_id else "")
        if finding.verdict is Verdict.CALM:
            log.info("%s is off the CPU again: %.0f%% of a core over the last %s", who,
                     finding.share * 100, duration(finding.span))  # fmt: skip
            return
        frame = sys._current_frames().get(run.ident) if run.ident is not None else None
        at = where(frame)
        log.warning("%s holds this worker process: %.0f%% of a core for %s%s; its other runs "
                    "wait for the GIL", who, finding.share * 100, duration(finding.span),
                    f", {at}" if at else "")  # fmt: skip
        if run.run_id is None:
            return
        record = self.deps.runs.get(run.run_id)
        if record is None:
            return
        event = ProgressEvent(run_id=run.run_id, thread=record.thread, text=hog_text(finding.span))
        self.deps.progress.put(event)
