"""The soak benchmark's own machinery, small: every run ends once and is announced once."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.soak import SoakConfig, run_soak

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("pool", ["fork", "threads"])
async def test_small_soak_loses_and_duplicates_nothing(
    redis_url: str, tmp_path: Path, pool: str
) -> None:
    config = SoakConfig(
        runs=20,
        workers=2,
        pool=pool,
        seed=7,
        topics=4,
        fail_rate=0.3,
        hang_rate=0.1,
        telegram_faults=2,
        archive_after_minutes=0.02,
        redis_url=redis_url,
        log_dir=tmp_path,
    )
    result = await run_soak(config)
    report = result.table()
    assert {"ok", "500", "429", "hang"} <= set(result.plan), report  # every path is exercised
    assert result.lost == 0, report
    assert result.duplicates == 0, report
    assert result.unexpected == {}, report
    assert result.delivery.misrouted == [] and result.delivery.stray == 0, report
    assert result.streams.dead_letters == 0, report
    assert result.archived == 20, report
    assert result.gateway_exit == 0, report
    assert result.parameters["worker pool"].startswith(pool), report
