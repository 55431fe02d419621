"""``fanbot bench ratelimit``'s figures and table: the goals met or missed, then the detail.

Pure formatting: no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RateLimitResult:
    """Every figure of one run of ``fanbot bench ratelimit`` (times in seconds)."""

    runs: int
    calls: int
    limit: int  # requests per minute
    window_seconds: float  # the fake's window (60: a real minute)
    per_window: int
    limiter: bool  # the workers knew the limit
    requests: int  # every request the fake saw (429s included)
    answered: int
    over_limit: int  # answered 429 by the fake: over its limit
    failed_429: int  # runs that ended without success because of a rate limit
    statuses: Counter[str]
    seen_waiting: int  # runs seen "waiting for the model's rate limit"
    total_seconds: float  # first spawn -> every run announced
    least_seconds: float  # what the limit allows at best (full windows before the last)
    not_announced: list[str]
    model_unknown: int
    machine: str
    log_dir: str = ""

    def goals(self) -> list[tuple[str, str, str, bool]]:
        """``(figure, value, goal, met)`` per goal."""
        return [
            ("requests over the limit", str(self.over_limit), "0", self.over_limit == 0),
            ("runs failed by 429", str(self.failed_429), "0", self.failed_429 == 0),
            (
                "runs announced",
                f"{self.runs - len(self.not_announced)} of {self.runs}",
                f"{self.runs}",
                not self.not_announced,
            ),
        ]

    def failures(self) -> list[str]:
        return [f"{name}: {value} (goal {goal})" for name, value, goal, met in self.goals()
                if not met]  # fmt: skip

    def table(self) -> str:
        window = (
            "a minute"
            if self.window_seconds == 60
            else f"{self.window_seconds:g} s (the minute scaled: {self.per_window} requests "
            f"per {self.window_seconds:g} s)"
        )
        lines = [
            f"fanbot bench ratelimit: {self.runs} runs x {self.calls} model calls against a "
            f"fake allowing {self.limit} requests/minute, window {window}; workers "
            + (
                "share the limit (openai.max_requests_per_minute)"
                if self.limiter
                else "NOT told the limit (the before)"
            ),
            "",
            "| figure | value | goal | |",
            "|---|---|---|---|",
        ]
        for name, value, goal, met in self.goals():
            lines.append(f"| {name} | {value} | {goal} | {'met' if met else 'MISSED'} |")
        extra = self.total_seconds - self.least_seconds
        lines += [
            "",
            f"requests: {self.requests} ({self.answered} answered, {self.over_limit} answered 429)",
            f"run statuses: {dict(sorted(self.statuses.items()))}",
            f"runs seen waiting for the model's rate limit: {self.seen_waiting}",
            f"total time: {self.total_seconds:.1f} s (first spawn -> every run announced); "
            f"the limit alone allows it in {self.least_seconds:.1f} s at best "
            f"(+{extra:.1f} s)",
            "bare-RQ comparison: not measured (the limit, not the queue, sets the pace: see "
            "the least time above)",
            f"machine: {self.machine}",
        ]
        if self.model_unknown:
            lines.append(f"requests that belonged to no run: {self.model_unknown}")
        if self.log_dir:
            lines.append(f"logs: {self.log_dir}")
        lines.append("FAIL" if self.failures() else "PASS")
        return "\n".join(lines)
