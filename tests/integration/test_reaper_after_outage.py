"""After a Redis outage (a Sentinel failover pauses writes ~11 s) heartbeats that could not
be written have expired: the maintenance loop holds back the reaper until Redis has been
steady for ``stale_after_seconds``, then judges as usual (the run goes on in a new
attempt: :mod:`bot.runs.recover`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.types import RunStatus
from tests.integration.test_control_redis import spawn_run
from workers.maintenance import maintenance_loop

STALE = 0.3


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"heartbeat_seconds": 0.05, "stale_after_seconds": STALE},  # type: ignore[arg-type]
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def sweep_for(deps: Deps, seconds: float, steady: float) -> None:
    stop = threading.Event()
    loop = threading.Thread(
        target=maintenance_loop, args=(deps, stop), kwargs={"steady": lambda: steady}
    )
    loop.start()
    time.sleep(seconds)
    stop.set()
    loop.join(5)


def test_the_reaper_waits_until_redis_has_been_steady(deps: Deps) -> None:
    record = spawn_run(deps)
    assert deps.runs.start(record.run_id, heartbeat_ttl=0.01).started
    time.sleep(STALE * 2)  # no heartbeat since: the reaper would end it now

    sweep_for(deps, 1.0, steady=STALE / 2)  # Redis came back a moment ago
    assert deps.runs.get(record.run_id).status is RunStatus.RUNNING  # type: ignore[union-attr]

    sweep_for(deps, 1.0, steady=STALE * 2)  # its worker is taken for lost: a new attempt
    after = deps.runs.get(record.run_id)
    assert after is not None and after.status is RunStatus.RUNNING and after.attempt == 2
