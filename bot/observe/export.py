"""The Prometheus exposition: one scrape reads the cluster's state from Redis.

Counters and histograms come from :class:`bot.store.metrics.MetricsStore` (written by
every process, forked job horses included); gauges are read now: queue depths and
workers from RQ (:class:`bot.store.jobs.Jobs`), active runs, the outbox backlog and the
dead letters from their owners. Any gateway or worker launcher serves the same totals.
If Redis cannot be read, the scrape still answers, with ``fanbot_redis_up 0`` only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from bot.config import Settings
from bot.deps import Deps
from bot.observe import metric_defs as c
from bot.redis.connect import connect
from bot.store.metrics import MetricsSnapshot
from bot.types import RunStatus

__all__ = ["CONTENT_TYPE_LATEST", "render"]

log = logging.getLogger(__name__)


class FanbotCollector(Collector):
    """A prometheus-client collector over Redis (``collect`` runs at every scrape)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def collect(self) -> Iterator[Metric]:
        try:
            families = [*self._stored(self.deps.metrics.read()), *self._gauges()]
        except RedisError as exc:
            log.warning("metrics scrape could not read Redis: %s", exc)
            yield _gauge(c.REDIS_UP, 0.0)
            return
        yield from families
        yield _gauge(c.REDIS_UP, 1.0)

    def _stored(self, snap: MetricsSnapshot) -> Iterator[Metric]:
        for metric in c.METRICS:
            if metric.kind is c.Kind.COUNTER:
                yield _counter(metric, snap)
            elif metric.kind is c.Kind.HISTOGRAM:
                yield _histogram(metric, snap)

    def _gauges(self) -> Iterator[Metric]:
        jobs = self.deps.jobs
        stats = jobs.queue_stats()
        yield _labelled(c.QUEUE_DEPTH, [([s.name], s.depth) for s in stats])
        yield _labelled(c.QUEUE_EXECUTING, [([s.name], s.executing) for s in stats])
        yield _labelled(c.QUEUE_OLDEST, [([s.name], s.oldest_seconds) for s in stats])
        yield _gauge(c.WAITING_FOR_SLOT, jobs.waiting_for_slot())
        yield _gauge(c.WORKERS, jobs.worker_count())
        yield _labelled(c.RUNS_ACTIVE, [([s], n) for s, n in self._active().items()])
        yield _gauge(c.APPROVALS_PARKED, 0)
        outbox = self.deps.outbox.backlog()
        yield _gauge(c.OUTBOX_BACKLOG, outbox.unacknowledged)
        yield _gauge(c.OUTBOX_LAG, outbox.oldest_seconds)
        yield _gauge(c.DEAD_LETTERS_NOW, self.deps.dead_letters.count())

    def _active(self) -> dict[str, int]:
        counts = {RunStatus.QUEUED.value: 0, RunStatus.RUNNING.value: 0}
        for status in self.deps.runs.active_statuses():
            if status in counts:
                counts[status] += 1
        return counts


SCRAPE_TIMEOUT = 5.0  # seconds a scrape waits for Redis before it answers fanbot_redis_up 0


def scrape_deps(settings: Settings) -> Deps:
    """Stores on a client of their own that fails fast: a scrape or a readiness probe
    must answer within its timeout, not retry a dead Redis for half a minute."""
    client = connect(
        settings.redis_url, retries=0, socket_timeout=SCRAPE_TIMEOUT, connect_timeout=2.0
    )
    return Deps.build(settings, client=client)


def render(deps: Deps) -> bytes:
    """One scrape in the Prometheus text format (blocking: call it off the event loop)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FanbotCollector(deps))
    return bytes(generate_latest(registry))


def _gauge(metric: c.Metric, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, value=value)


def _labelled(metric: c.Metric, rows: list[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _values(metric: c.Metric, labels: tuple[tuple[str, str], ...]) -> list[str]:
    given = dict(labels)
    return [given.get(name, "") for name in metric.labels]


def _counter(metric: c.Metric, snap: MetricsSnapshot) -> CounterMetricFamily:
    family = CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    for (name, labels), value in sorted(snap.counters.items()):
        if name == metric.name:
            family.add_metric(_values(metric, labels), value)
    return family


def _histogram(metric: c.Metric, snap: MetricsSnapshot) -> HistogramMetricFamily:
    family = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    for (name, labels), hist in sorted(snap.histograms.items(), key=lambda kv: kv[0]):
        if name != metric.name:
            continue
        for bound in c.LATENCY_BUCKETS:  # every bucket, so series aggregate by ``le``
            hist.buckets.setdefault(float(bound), 0.0)
        buckets: Any = [(_le(b), n) for b, n in hist.cumulative()]
        family.add_metric(_values(metric, labels), buckets, hist.sum)
    return family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
