"""Redis commands per unit of work: ``INFO commandstats`` deltas, the idle traffic subtracted.

The one place this is counted, for ``fanbot bench compare``'s commands row
(:mod:`bot.bench.compare_commands`) and ``fanbot bench commands``
(:mod:`bot.bench.run_commands`, which adds a breakdown by code from ``MONITOR``).

A :class:`Window` is the calls per command Redis counted between two snapshots and how long
that took (:func:`measure` around blocking work; :func:`start` then :meth:`Started.window`
around awaited work). Work measured in one window (a batch of runs) minus the idle traffic
of the same length (measured in a window where nothing ran: heartbeats, dequeuers' waits,
the gateway's stream reads, the maintenance sweep), divided by the units of work, is the
cost per unit (:func:`per_unit`). Redis counts each command a Lua script calls as well as
the script's ``EVALSHA``. ``INFO`` itself (the snapshots) is never counted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

_OWN = "info"


def snapshot(client: redis.Redis) -> Counter[str]:
    """Calls per command (``hset``, ``client|list``) Redis has counted since its start."""
    stats: dict[str, Any] = client.info("commandstats")
    calls: Counter[str] = Counter()
    for name, fields in stats.items():
        command = name.removeprefix("cmdstat_")
        if command != _OWN:
            calls[command] = int(fields["calls"])
    return calls


@dataclass(frozen=True)
class Window:
    """Calls per command counted in a window, and its length in seconds."""

    calls: Counter[str]
    seconds: float

    @property
    def per_second(self) -> float:
        """All commands counted per second of the window."""
        return sum(self.calls.values()) / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Started:
    """A window's opening snapshot and when it was taken (:func:`start`)."""

    calls: Counter[str]
    at: float

    def window(self, client: redis.Redis) -> Window:
        """What Redis counted from the start until now."""
        return Window(calls=snapshot(client) - self.calls, seconds=time.monotonic() - self.at)


def start(client: redis.Redis) -> Started:
    """Open a window (for work that is awaited rather than called; see :func:`measure`)."""
    return Started(calls=snapshot(client), at=time.monotonic())


def measure(client: redis.Redis, work: Callable[[], None]) -> Window:
    """The commands Redis counted while ``work()`` ran (everybody's, not only its own)."""
    started = start(client)
    work()
    return started.window(client)


def idle_traffic(client: redis.Redis, seconds: float) -> Window:
    """What Redis counted in ``seconds`` of waiting (run it while nothing is at work)."""
    return measure(client, lambda: time.sleep(seconds))


def per_unit(
    work: Window, idle: Window, units: int, *, own: Mapping[str, int] | None = None
) -> dict[str, float]:
    """Calls per command and unit of work: ``work`` minus ``idle`` scaled to its length,
    minus ``own`` (commands the measuring side sent itself, e.g. its polls), over ``units``."""
    scale = work.seconds / idle.seconds if idle.seconds > 0 else 0.0
    own = own or {}
    names = set(work.calls) | set(idle.calls) | set(own)
    return {
        name: (work.calls[name] - idle.calls[name] * scale - own.get(name, 0)) / units
        for name in sorted(names)
    }


def total(costs: Mapping[str, float]) -> float:
    """All commands per unit (commands the idle window had more of count negative)."""
    return sum(costs.values())


def top(costs: Mapping[str, float], count: int | None = 8) -> str:
    """``HSET 70, HGET 36, EVALSHA 5.5``: the ``count`` commands used most per unit (None:
    all of them), those under 0.05 (the idle window had more of them) left out."""
    ranked = sorted(((v, k) for k, v in costs.items() if v >= 0.05), reverse=True)[:count]
    return ", ".join(f"{name.upper()} {_amount(value)}" for value, name in ranked)


def _amount(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
