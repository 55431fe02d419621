"""``fanbot bench ratelimit`` small: real workers share the fake's limit, none goes over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.bench.bench_commands import app
from bot.bench.ratelimit import RateLimitConfig, run_ratelimit


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_runs_share_the_limit_wait_for_it_and_none_goes_over(tmp_path: Path) -> None:
    config = RateLimitConfig(
        runs=6, calls=2, limit=120, window_seconds=2.0, processes=2, topics=2, log_dir=tmp_path
    )
    result = await run_ratelimit(config)
    table = result.table()
    assert result.per_window == 4, table  # 120 a minute, scaled to 2 s
    assert result.over_limit == 0 and result.failed_429 == 0, table
    assert result.statuses == {"success": 6} and result.not_announced == [], table
    assert result.answered == result.requests == 12, table
    assert result.seen_waiting > 0, table  # 12 requests, 4 per window: some runs waited
    assert "| requests over the limit | 0 | 0 | met |" in table and table.endswith("PASS")
    assert "the minute scaled" in table and "load average" in table


def test_the_cli_offers_ratelimit() -> None:
    output = CliRunner().invoke(app, ["ratelimit", "--help"]).output
    for option in ("--runs", "--limit", "--window-seconds", "--no-limiter"):
        assert option in output
