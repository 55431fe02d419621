"""When a schedule fires (pure): ``30m``-style intervals and 5-field cron expressions.

An interval ticks at ``anchor + k * seconds`` (the anchor is when the schedule was made);
a cron expression ticks as cron does, in UTC (croniter). A firing whose tick lies more
than ``late_after`` seconds in the past was held up (no worker swept): it fires once, not
once per missed tick, and says how late it is (:func:`plan_firing`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from croniter import croniter

from bot.text.units import duration

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_INTERVAL = re.compile(r"(?:\d{1,6}[smhd]){1,4}")
_PART = re.compile(r"(\d+)([smhd])")
CRON_FIELDS = 5
MAX_INTERVAL = 366 * 86_400


@dataclass(frozen=True, kw_only=True)
class Every:
    """How often a schedule fires.

    Attributes:
        text: As stored and shown: ``30m`` or a cron expression ``0 9 * * 1-5``.
        seconds: The interval (0 for a cron expression).
    """

    text: str
    seconds: int = 0

    @property
    def is_cron(self) -> bool:
        return self.seconds == 0

    def describe(self) -> str:
        """``every 30m`` / ``cron `0 9 * * 1-5` (UTC)``."""
        return f"cron `{self.text}` (UTC)" if self.is_cron else f"every {self.text}"

    def next_after(self, t: float, *, anchor: float) -> float:
        """The first tick strictly after ``t``."""
        if self.is_cron:
            start = datetime.fromtimestamp(t, tz=UTC)
            return float(croniter(self.text, start).get_next(float))
        k = math.floor((t - anchor) / self.seconds) + 1
        return anchor + max(k, 1) * self.seconds


def parse_interval(word: str) -> int | None:
    """``30m`` -> 1800, ``1h30m`` -> 5400; None when ``word`` is not an interval."""
    word = word.lower()
    if not _INTERVAL.fullmatch(word):
        return None
    return sum(int(n) * UNITS[u] for n, u in _PART.findall(word))


def parse_every(words: Sequence[str], *, min_seconds: int) -> tuple[Every, int] | str:
    """The schedule at the start of ``words``: ``(every, words used)``, or why not.

    An interval is one word (``30m``, ``2h``, ``1d``, ``1h30m``); a cron expression is
    the first five words (minute hour day-of-month month day-of-week).
    """
    if not words:
        return "needs an interval (`30m`, `2h`, `1d`) or a cron expression (`0 9 * * 1-5`)"
    seconds = parse_interval(words[0])
    if seconds is not None:
        if seconds < min_seconds:
            shortest = duration(min_seconds, style="spaced")
            return f"`{words[0]}` is too often: the shortest interval is {shortest}"
        if seconds > MAX_INTERVAL:
            return f"`{words[0]}` is too long: the longest interval is 366d"
        return Every(text=words[0].lower(), seconds=seconds), 1
    expr = " ".join(words[:CRON_FIELDS])
    if len(words) < CRON_FIELDS or not _valid_cron(expr):
        shown = words[0][:20].replace("`", "'")
        return (
            f"`{shown}` is neither an interval (`30m`, `2h`, `1d`) nor the start of a "
            "5-field cron expression (`0 9 * * 1-5`: minute hour day month weekday, UTC)"
        )
    return Every(text=expr), CRON_FIELDS


def _valid_cron(expr: str) -> bool:
    if len(expr.split()) != CRON_FIELDS or not all(
        re.fullmatch(r"[0-9A-Za-z*/,\-?LW#]+", f) for f in expr.split()
    ):
        return False
    try:
        return bool(croniter.is_valid(expr))
    except Exception:  # croniter raises odd types on odd input
        return False


def every_from_text(text: str) -> Every:
    """An :class:`Every` back from its stored ``text`` (trusted: it was parsed once)."""
    seconds = parse_interval(text)
    return Every(text=text, seconds=seconds or 0)


@dataclass(frozen=True, kw_only=True)
class Firing:
    """What one due schedule does now.

    Attributes:
        due: The tick being fired.
        next_at: The tick after now (missed ticks in between are skipped).
        late_seconds: ``now - due`` when that is past the lateness threshold, else 0.
        missed: Ticks that passed unfired besides this one.
    """

    due: float
    next_at: float
    late_seconds: float = 0.0
    missed: int = 0

    def late_note(self) -> str:
        """``fired 2h late: workers were down`` ("" when on time)."""
        if not self.late_seconds:
            return ""
        note = f"fired {duration(self.late_seconds, style='spaced')} late: workers were down"
        if self.missed:
            ticks = "tick" if self.missed == 1 else "ticks"
            note += f" ({self.missed} more {ticks} passed meanwhile; it ran once)"
        return note


def plan_firing(
    every: Every, *, due: float, now: float, anchor: float, late_after: float
) -> Firing:
    """The firing of a schedule whose tick ``due`` has come (``due <= now``)."""
    next_at = every.next_after(now, anchor=anchor)
    missed = 0
    tick = every.next_after(due, anchor=anchor)
    while tick <= now and missed < 10_000:
        missed += 1
        tick = every.next_after(tick, anchor=anchor)
    late = now - due
    return Firing(
        due=due,
        next_at=next_at,
        late_seconds=late if late > late_after else 0.0,
        missed=missed,
    )
