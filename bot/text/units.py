"""Durations, sizes, token counts and times as people read them (pure).

Every place that shows one of these goes through this module, so ``1m02s`` means the same
thing on a status card, in ``/subagents info``, on the ops page and in the console.

Durations have a few styles, each kept for the place that needs it:

=========  ==========================================  ===================================
style      examples                                    used by
=========  ==========================================  ===================================
clock      ``0s``, ``1m02s``, ``1h02m``                announces, lists, info, ops page
tenths     ``3.2s``, then as *clock* from a minute on  a status card's tool tally
spaced     ``45s``, ``2h 5m``, ``3d``                  schedules (intervals, "in 17h 20m")
exact      ``30 s``, ``5 min``, ``1 h``                an approval's time limit
coarse     ``90s``, ``45m``, ``3h``                    the doctor's "newest … ago"
=========  ==========================================  ===================================
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

DurationStyle = Literal["clock", "tenths", "spaced", "exact", "coarse"]

_SPACED_UNITS = (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1))


def duration(seconds: float, *, style: DurationStyle = "clock", floor: bool = False) -> str:
    """``seconds`` in ``style`` (see the module's table); negative counts as 0.

    ``floor`` cuts a *clock* duration to whole seconds instead of rounding it (the
    console's ticking timers, which must not run ahead of the second).
    """
    if style == "tenths":
        return f"{max(0.0, seconds):.1f}s" if seconds < 59.95 else _clock(round(seconds))
    if style == "spaced":
        return _spaced(max(0, round(seconds)))
    if style == "exact":
        return _exact(int(seconds))
    if style == "coarse":
        return _coarse(max(0, int(seconds)))
    return _clock(max(0, int(seconds)) if floor else round(seconds))


def _clock(total: int) -> str:
    total = max(0, total)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _spaced(left: int) -> str:
    """The largest unit, and the next one when it is not zero."""
    for i, (unit, size) in enumerate(_SPACED_UNITS):
        if left >= size or unit == "s":
            text = f"{left // size}{unit}"
            if i + 1 < len(_SPACED_UNITS):
                sub, sub_size = _SPACED_UNITS[i + 1]
                rest = (left % size) // sub_size
                text += f" {rest}{sub}" if rest else ""
            return text
    return "0s"


def _exact(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _coarse(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def ago(seconds: float) -> str:
    """``1m02s ago``."""
    return f"{duration(seconds)} ago"


def size(n: int, *, precise: bool = False) -> str:
    """A byte count: ``120 KB``, ``1.2 MB`` (attachment notes); ``precise`` keeps four
    significant digits, ``123.4 kB`` (workspace messages, where a file's size is checked
    against a limit)."""
    if n < 1000:
        return f"{n} B"
    if precise:
        return f"{n / 1000:.4g} kB" if n < 1_000_000 else f"{n / 1_000_000:.4g} MB"
    return f"{n / 1000:.0f} KB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


def tokens(n: int, *, trim: bool = False) -> str:
    """``950`` -> ``950``, ``3100`` -> ``3.1k``, ``2_500_000`` -> ``2.5M``; ``trim`` drops
    a zero decimal (``3k``, as budgets are written)."""
    if n < 1000:
        shown = str(n)
    elif n < 1_000_000:
        shown = f"{n / 1000:.1f}k"
    else:
        shown = f"{n / 1_000_000:.1f}M"
    return shown.replace(".0k", "k").replace(".0M", "M") if trim else shown


def utc_stamp(t: float, *, seconds: bool = True, zone: bool = True) -> str:
    """``2026-11-24 09:00:05 UTC``; without ``seconds`` ``2026-11-24 09:00 UTC``."""
    shown = dt.datetime.fromtimestamp(t, dt.UTC).strftime(
        "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    )
    return f"{shown} UTC" if zone else shown


def utc_clock(t: float) -> str:
    """``15:40 UTC``."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M UTC")


def same_utc_day(a: float, b: float) -> bool:
    return (
        dt.datetime.fromtimestamp(a, dt.UTC).date() == dt.datetime.fromtimestamp(b, dt.UTC).date()
    )
