"""Cluster-wide metric counters and histograms in Redis, in one owner.

Structures (keys in :mod:`bot.keys`): ``metrics:counters``, a hash ``series -> value``
(``HINCRBY`` / ``HINCRBYFLOAT``), and ``metrics:histograms``, a hash ``series|bucket ->
count`` plus ``series|sum``, where a series is a metric name and its sorted labels. Buckets
are stored per bucket (not cumulative) under their upper bound, so the reader can sum them
into Prometheus' cumulative ``le`` buckets whatever bounds an older version wrote; a
histogram's count is the sum of its buckets (a ``series|count`` field older versions also
wrote is not read).

A process adds its updates up in memory (:meth:`MetricsStore.add`: updates of one series
merge into one command) and writes them in one pipeline (:meth:`MetricsStore.flush`) at
most :data:`FLUSH_SECONDS` later: a job at its end (a run's with its terminal transition,
in the finalize script), the gateway every :data:`FLUSH_SECONDS` and before each scrape of
its ``/metrics``, any process when it closes its stores. A busy process so writes each
series once per flush, not once per event. :meth:`MetricsStore.read` is the one reader
(the exporter runs it in a thread at scrape time).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import RedisOwner

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


Write = tuple[str, str, str, int | float]
"""``(command, key, field, amount)``: one ``HINCRBY`` or ``HINCRBYFLOAT``."""

FLUSH_SECONDS = 5.0
"""How long a process may keep metric updates before writing them."""


def commands(keys: Keys, updates: Iterable[Update]) -> list[Write]:
    """The writes of ``updates`` (pure): those of one field and command merge into one."""
    return merge(_writes(keys, updates))


def merge(writes: Iterable[Write]) -> list[Write]:
    """``writes`` with those of one field and command added up (pure)."""
    amounts: dict[tuple[str, str, str], float] = {}
    for command, key, name, amount in writes:
        amounts[(command, key, name)] = amounts.get((command, key, name), 0) + amount
    return [(command, key, name, amount) for (command, key, name), amount in amounts.items()]


def _writes(keys: Keys, updates: Iterable[Update]) -> Iterator[Write]:
    for update in updates:
        if isinstance(update, Count):
            name = series(update.name, update.labels)
            if float(update.amount).is_integer():
                yield ("HINCRBY", keys.metrics_counters, name, int(update.amount))
            else:
                yield ("HINCRBYFLOAT", keys.metrics_counters, name, update.amount)
            continue
        base = series(update.name, update.labels) + _SEP
        bound = _bound_text(bucket_of(update.value, update.bounds))
        yield ("HINCRBY", keys.metrics_histograms, base + bound, 1)
        yield ("HINCRBYFLOAT", keys.metrics_histograms, base + "sum", float(update.value))


class Pending:
    """Metric writes added up in this process until they are written (thread-safe).

    Writes of one field and command merge; a forked child starts empty (what it inherited
    is its parent's to write)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: list[Write] = []
        self._since: float | None = None
        self._pid = os.getpid()

    def _own(self) -> None:
        if self._pid != os.getpid():  # forked: the lock may be held by a thread left behind
            self._lock = threading.Lock()
            self._writes, self._since, self._pid = [], None, os.getpid()

    def add(self, writes: Iterable[Write]) -> None:
        self._own()
        with self._lock:
            self._writes = merge([*self._writes, *writes])
            if self._writes and self._since is None:
                self._since = time.monotonic()

    def due(self, max_age: float = FLUSH_SECONDS) -> bool:
        """Something waits, added at least ``max_age`` seconds ago."""
        self._own()
        since = self._since
        return since is not None and time.monotonic() - since >= max_age

    def take(self) -> list[Write]:
        """Every write waiting; none is left."""
        self._own()
        with self._lock:
            writes, self._writes, self._since = self._writes, [], None
        return writes

    def __bool__(self) -> bool:
        self._own()
        return bool(self._writes)


def queue(pipe: Any, writes: Iterable[Write]) -> None:
    """Queue ``writes`` on ``pipe`` (the caller executes it)."""
    for command, key, name, amount in writes:
        if command == "HINCRBY":
            pipe.hincrby(key, name, int(amount))
        else:
            pipe.hincrbyfloat(key, name, float(amount))


class MetricsStore(RedisOwner):
    """Owner of the ``metrics:*`` hashes: this process's writes, and the one reader."""

    def __init__(self, *, redis: Redis, keys: Keys) -> None:
        super().__init__(redis=redis, keys=keys)
        self.pending = Pending()

    def write(self, updates: Iterable[Update]) -> None:
        """Apply ``updates`` now, in one round trip."""
        self._apply(commands(self.keys, updates))

    def add(self, updates: Iterable[Update]) -> None:
        """Keep ``updates`` for the next :meth:`flush` (no I/O)."""
        self.pending.add(commands(self.keys, updates))

    def keep(self, writes: Iterable[Write]) -> None:
        """Keep ``writes`` (taken by :meth:`carried` and not written) for the next flush."""
        self.pending.add(writes)

    def due(self) -> bool:
        """Kept updates have waited :data:`FLUSH_SECONDS`."""
        return self.pending.due()

    def flush(self) -> None:
        """Write every kept update in one round trip (nothing when none waits); kept
        again if Redis refuses them."""
        with self.carried() as writes:
            self._apply(writes)

    def _apply(self, writes: list[Write]) -> None:
        if not writes:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            queue(pipe, writes)
            pipe.execute()

    @contextmanager
    def carried(self) -> Iterator[list[Write]]:
        """The kept writes, taken for a script that writes them (:meth:`part`); kept
        again if the block raises."""
        writes = self.pending.take()
        try:
            yield writes
        except BaseException:
            self.keep(writes)
            raise

    def part(self, updates: Iterable[Update], carried: Iterable[Write] = ()) -> Part:
        """:data:`APPLY_METRICS`'s part writing ``updates`` and the ``carried`` writes."""
        keys = (self.keys.metrics_counters, self.keys.metrics_histograms)
        ops = [
            [command, keys.index(key) + 1, name, str(amount)]
            for command, key, name, amount in merge([*carried, *_writes(self.keys, updates)])
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
            if part == "count":
                continue  # an older version's; the buckets say it
            hist = snap.histograms.setdefault(parse_series(head), Histogram())
            number = float(as_text(value))
            if part == "sum":
                hist.sum = number
            else:
                hist.buckets[float(part.replace("+Inf", "inf"))] = number
                hist.count += number
        return snap
