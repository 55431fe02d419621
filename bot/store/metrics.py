"""Cluster-wide metric counters and histograms in Redis, in one owner.

Structures (keys in :mod:`bot.keys`): ``metrics:counters``, a hash ``series -> value``
(``HINCRBY`` / ``HINCRBYFLOAT``), and ``metrics:histograms``, a hash ``series|bucket ->
count`` plus ``series|sum`` and ``series|count``, where a series is a metric name and its
sorted labels. Buckets are stored per bucket (not cumulative) under their upper bound, so
the reader can sum them into Prometheus' cumulative ``le`` buckets whatever bounds an
older version wrote.

Both writers only *queue* commands (:func:`queue`), the same on a sync and an async
redis-py pipeline, so workers (:class:`MetricsStore`, sync, ``deps.metrics``) and the
gateway (:class:`GatewayMetrics`, async) differ in one line: how they run the pipeline.
:meth:`MetricsStore.read` is the one reader (sync: the exporter runs it in a thread at
scrape time).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import AsyncRedisOwner, RedisOwner

Labels = tuple[tuple[str, str], ...]
"""Sorted ``(name, value)`` pairs: a hashable label set."""

MAX_LABEL_CHARS = 100  # a label value past this is cut (a runaway model name, say)
_SEP = "|"

_APPLY_METRICS = """
local function apply_metrics(k, a)
  for _, op in ipairs(cjson.decode(a[1])) do
    redis.call(op[1], k[op[2]], op[3], op[4])
  end
end
"""
APPLY_METRICS = Fragment(name="apply_metrics", lua=_APPLY_METRICS, keys=2, args=1)
"""Metric updates as a piece of a script spanning owners (keys: the counters and histograms
hashes; ``a[1]``: JSON ``[command, key index, field, amount]`` lists,
:meth:`MetricsStore.part`); see :mod:`bot.store.lua_parts`."""


@dataclass(frozen=True)
class Count:
    """Add ``amount`` to the counter ``name`` with ``labels``."""

    name: str
    labels: Mapping[str, str]
    amount: float = 1


@dataclass(frozen=True)
class Observe:
    """Record ``value`` in the histogram ``name`` with ``labels`` and bucket ``bounds``."""

    name: str
    labels: Mapping[str, str]
    value: float
    bounds: Sequence[float]


Update = Count | Observe


@dataclass(kw_only=True)
class Histogram:
    """One histogram series as read back: per-bucket counts by upper bound, sum, count."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0

    def cumulative(self) -> list[tuple[float, float]]:
        """``(le, count of observations <= le)`` for every stored bound, ending at +Inf."""
        running, out = 0.0, []
        for bound in sorted(self.buckets):
            running += self.buckets[bound]
            out.append((bound, running))
        if not out or out[-1][0] != math.inf:
            out.append((math.inf, running))
        return out


@dataclass(kw_only=True)
class MetricsSnapshot:
    """Every counter and histogram series, keyed by ``(name, labels)``."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)


def series(name: str, labels: Mapping[str, str]) -> str:
    """The hash field of one series (pure): ``name|{"label": "value", ...}``."""
    clean = {k: str(v)[:MAX_LABEL_CHARS] for k, v in sorted(labels.items())}
    return name + _SEP + json.dumps(clean, separators=(",", ":"), ensure_ascii=False)


def parse_series(text: str) -> tuple[str, Labels]:
    """Read :func:`series` back (pure)."""
    name, _, rest = text.partition(_SEP)
    labels = json.loads(rest) if rest else {}
    return name, tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def bucket_of(value: float, bounds: Sequence[float]) -> float:
    """The upper bound of the bucket ``value`` falls in (pure); +Inf past the last."""
    return next((b for b in sorted(bounds) if value <= b), math.inf)


def _bound_text(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


def commands(keys: Keys, updates: Iterable[Update]) -> list[tuple[str, str, str, int | float]]:
    """The ``(command, key, field, amount)`` writes of ``updates``."""
    out: list[tuple[str, str, str, int | float]] = []
    for update in updates:
        if isinstance(update, Count):
            name = series(update.name, update.labels)
            if float(update.amount).is_integer():
                out.append(("HINCRBY", keys.metrics_counters, name, int(update.amount)))
            else:
                out.append(("HINCRBYFLOAT", keys.metrics_counters, name, update.amount))
            continue
        base = series(update.name, update.labels) + _SEP
        bound = _bound_text(bucket_of(update.value, update.bounds))
        out.append(("HINCRBY", keys.metrics_histograms, base + bound, 1))
        out.append(("HINCRBY", keys.metrics_histograms, base + "count", 1))
        out.append(("HINCRBYFLOAT", keys.metrics_histograms, base + "sum", float(update.value)))
    return out


def queue(pipe: Any, keys: Keys, updates: Iterable[Update]) -> None:
    """Queue ``updates`` on ``pipe`` (a sync or async pipeline; the caller executes it)."""
    for command, key, name, amount in commands(keys, updates):
        if command == "HINCRBY":
            pipe.hincrby(key, name, int(amount))
        else:
            pipe.hincrbyfloat(key, name, float(amount))


class GatewayMetrics(AsyncRedisOwner):
    """The gateway's writer of the ``metrics:*`` hashes (its async client)."""

    async def write(self, updates: Iterable[Update]) -> None:
        """Apply ``updates`` in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            queue(pipe, self.keys, updates)
            await pipe.execute()


class MetricsStore(RedisOwner):
    """Owner of the ``metrics:*`` hashes: the sync writer and the one reader."""

    def write(self, updates: Iterable[Update]) -> None:
        """Apply ``updates`` in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            queue(pipe, self.keys, updates)
            pipe.execute()

    def part(self, updates: Iterable[Update]) -> Part:
        """:data:`APPLY_METRICS`'s part writing ``updates``."""
        keys = (self.keys.metrics_counters, self.keys.metrics_histograms)
        ops = [
            [command, keys.index(key) + 1, name, str(amount)]
            for command, key, name, amount in commands(self.keys, updates)
        ]
        return Part(fragment=APPLY_METRICS, keys=keys, args=(json.dumps(ops),))

    def read(self) -> MetricsSnapshot:
        """Every series, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.metrics_counters)
            pipe.hgetall(self.keys.metrics_histograms)
            counters, histograms = pipe.execute()
        snap = MetricsSnapshot()
        for raw, value in counters.items():
            snap.counters[parse_series(as_text(raw))] = float(as_text(value))
        for raw, value in histograms.items():
            head, _, part = as_text(raw).rpartition(_SEP)
            hist = snap.histograms.setdefault(parse_series(head), Histogram())
            number = float(as_text(value))
            if part == "sum":
                hist.sum = number
            elif part == "count":
                hist.count = number
            else:
                hist.buckets[float(part.replace("+Inf", "inf"))] = number
        return snap
