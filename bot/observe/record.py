"""One-line hooks that record a metric event from sync code (runs, jobs, ingress).

Each adds its updates to the ones this process keeps (:mod:`bot.store.metrics`), written
in one pipeline once they have waited long enough, and never raises: a metric that cannot
be written (Redis gone for a moment) is logged at debug level and kept for the next
flush, and the work goes on.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from bot.deps import Deps
from bot.observe import metric_defs as catalog
from bot.store.metrics import Update
from bot.types import RunRecord

log = logging.getLogger(__name__)


def write(deps: Deps, updates: list[Update]) -> None:
    """Count ``updates`` in the cluster's metrics: kept, and written with the others kept
    once they are due (best effort)."""
    deps.metrics.add(updates)
    if deps.metrics.due():
        flush(deps)


def flush(deps: Deps) -> None:
    """Write the updates this process keeps now (best effort)."""
    try:
        deps.metrics.flush()
    except (RedisError, OSError) as exc:
        log.debug("metrics not written yet: %s", exc)


def run_spawned(deps: Deps, record: RunRecord) -> None:
    write(deps, catalog.run_started(record))


def inbound(deps: Deps, platform: str, outcome: catalog.InboundOutcome) -> None:
    write(deps, catalog.inbound(platform, outcome))


def resumed(deps: Deps, kind: str, outcome: str) -> None:
    """A run or turn whose worker was lost: what became of it (written at once: the
    process that noticed may be a launcher about to exit)."""
    write(deps, catalog.resume(kind, outcome))
    flush(deps)
