"""``fanbot bench many``'s figures and table: the goals met or missed, then the detail.

Pure formatting: no I/O.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from bot.bench.stats import percentile

MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ManyResult:
    """Every figure of one run of ``fanbot bench many`` (sizes in bytes, delays in seconds)."""

    runs: int
    processes: int
    concurrency: int
    stream: str  # how the fake model streamed
    max_streams: int  # model streams open at once, the most seen
    peak_streams: int  # model streams open when the peak PSS was read
    pss_idle: int  # all worker processes and their launcher, before any run
    pss_peak: int  # the same, the largest reading while the runs streamed
    pss_fullest: int  # the same, read with the most streams open (``fullest_streams``)
    fullest_streams: int
    spawn_seconds: float  # first spawn -> last spawn
    announced_seconds: float  # first spawn -> every run announced
    pss_samples: int
    pss_goal: int
    not_terminal: list[str]
    not_announced: list[str]
    duplicated: dict[str, int]  # label -> announces
    statuses: Counter[str]
    announce_delays: list[float]
    model_unknown: int
    logs: dict[str, Counter[str]]
    machine: str
    log_dir: str = ""

    @property
    def lost(self) -> list[str]:
        return sorted(set(self.not_terminal) | set(self.not_announced))

    def failures(self) -> list[str]:
        """The checks that failed: a run lost or announced more than once."""
        problems = []
        if self.lost:
            problems.append(f"{len(self.lost)} run(s) lost: {', '.join(self.lost[:10])}")
        if self.duplicated:
            problems.append(f"{len(self.duplicated)} run(s) announced more than once")
        return problems

    def goals(self) -> list[tuple[str, str, str, bool]]:
        """``(figure, value, goal, met)`` per goal."""
        return [
            (f"subagents running at once (model streams open, most seen) of {self.runs}",
             str(self.max_streams), f"all {self.runs}", self.max_streams >= self.runs),
            (f"total PSS of all worker processes, {self.peak_streams} runs streaming "
             f"({self.processes} process(es) and their launcher; peak of {self.pss_samples} "
             "readings)", _mb(self.pss_peak), f"≤ {self.pss_goal / 1024 / MIB:g} GB",
             self.pss_peak <= self.pss_goal),
            ("runs lost (not terminal, or never announced)", str(len(self.lost)), "0",
             not self.lost),
            ("runs announced more than once", str(len(self.duplicated)), "0",
             not self.duplicated),
        ]  # fmt: skip

    def table(self) -> str:
        lines = ["| figure | value | goal | |", "|---|---|---|---|"]
        for figure, value, goal, met in self.goals():
            lines.append(f"| {figure} | {value} | {goal} | {'met' if met else 'missed'} |")
        delays = self.announce_delays
        if delays:
            p50, p99 = statistics.median(delays) * 1000, percentile(delays, 0.99) * 1000
            shown = f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {max(delays) * 1000:.0f} ms"
        else:
            shown = "-"
        per_run = (self.pss_fullest - self.pss_idle) / max(1, self.fullest_streams)
        lines += [
            "",
            f"- announce p99, model stream ends → announce accepted by the platform: {shown} "
            f"(n={len(delays)})",
            f"- PSS of the worker processes and their launcher: {_mb(self.pss_idle)} idle, "
            f"{_mb(self.pss_fullest)} with {self.fullest_streams} runs streaming "
            f"({per_run / MIB:.2f} MB per run over idle), {_mb(self.pss_peak)} at the peak",
            f"- first spawn → last spawn {self.spawn_seconds:.1f} s, → every run announced "
            f"{self.announced_seconds:.1f} s",
            f"- statuses: {_counts(self.statuses)}",
            f"- lost: {len(self.lost)} (not terminal {len(self.not_terminal)}, not announced "
            f"{len(self.not_announced)}); duplicated: {len(self.duplicated)}",
            f"- threads pool: {self.processes} process(es) x {self.concurrency} runs at once; "
            f"cap {self.runs}; model: {self.stream}",
            f"- model requests of no run: {self.model_unknown}",
        ]
        lines += [f"- {name} log: {_counts(c) or 'clean'}" for name, c in self.logs.items()]
        lines.append(f"- machine: {self.machine}")
        if self.log_dir:
            lines.append(f"- logs: {self.log_dir}")
        problems = self.failures()
        lines.append("PASS" if not problems else "FAIL: " + "; ".join(problems))
        return "\n".join(lines)


def _mb(size: int) -> str:
    return f"{size / MIB:.0f} MB"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))
