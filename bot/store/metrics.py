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
from bot.store.owner import AsyncRedisOwner, RedisOwner

Labels = tuple[tuple[str, str], ...]
"""Sorted ``(name, value)`` pairs: a hashable label set."""

MAX_LABEL_CHARS = 100  # a label value past this is cut (a runaway model name, say)
_SEP = "|"


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
class Snapshot:
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


def queue(pipe: Any, keys: Keys, updates: Iterable[Update]) -> None:
    """Queue ``updates`` on ``pipe`` (a sync or async pipeline; the caller executes it)."""
    for update in updates:
        if isinstance(update, Count):
            _count(pipe, keys, update)
        else:
            _observe(pipe, keys, update)


def _count(pipe: Any, keys: Keys, update: Count) -> None:
    name = series(update.name, update.labels)
    if float(update.amount).is_integer():
        pipe.hincrby(keys.metrics_counters, name, int(update.amount))
    else:
        pipe.hincrbyfloat(keys.metrics_counters, name, update.amount)


def _observe(pipe: Any, keys: Keys, update: Observe) -> None:
    base = series(update.name, update.labels) + _SEP
    bound = _bound_text(bucket_of(update.value, update.bounds))
    pipe.hincrby(keys.metrics_histograms, base + bound, 1)
    pipe.hincrby(keys.metrics_histograms, base + "count", 1)
    pipe.hincrbyfloat(keys.metrics_histograms, base + "sum", float(update.value))


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

    def read(self) -> Snapshot:
        """Every series, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.metrics_counters)
            pipe.hgetall(self.keys.metrics_histograms)
            counters, histograms = pipe.execute()
        snap = Snapshot()
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
