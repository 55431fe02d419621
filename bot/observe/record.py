"""One-line hooks that record a metric event from sync code (runs, jobs, ingress).

Each writes its updates in one pipeline and never raises: a metric that cannot be written
(Redis gone for a moment) is logged at debug level and lost, and the work goes on.
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
    """Apply ``updates`` to the cluster's metrics (best effort)."""
    try:
        deps.metrics.write(updates)
    except (RedisError, OSError) as exc:
        log.debug("metrics not recorded: %s", exc)


def run_spawned(deps: Deps, record: RunRecord) -> None:
    write(deps, catalog.run_started(record))


def inbound(deps: Deps, platform: str, outcome: catalog.InboundOutcome) -> None:
    write(deps, catalog.inbound(platform, outcome))
