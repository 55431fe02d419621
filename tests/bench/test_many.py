"""``fanbot bench many`` small: every run streams at once, is announced once, and counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.bench.bench_commands import app
from bot.bench.many import ManyConfig, run_many


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_thirty_runs_stream_at_once_and_are_each_announced_once(tmp_path: Path) -> None:
    config = ManyConfig(
        runs=30, processes=2, stream_seconds=4.0, chunk_seconds=0.5, topics=4, log_dir=tmp_path
    )
    result = await run_many(config)
    table = result.table()
    assert result.failures() == [], table
    assert result.max_streams == 30, table  # all of them at once
    assert result.lost == [] and result.duplicated == {}, table
    assert result.statuses == {"success": 30}, table
    assert len(result.announce_delays) == 30 and min(result.announce_delays) > 0, table
    assert 0 < result.pss_idle < result.pss_peak, table
    assert 0 < result.fullest_streams <= 30 and 0 < result.pss_fullest <= result.pss_peak, table
    assert 0 < result.spawn_seconds < result.announced_seconds, table
    assert result.concurrency == 17, table  # half the cap each, plus the dequeuers' slots
    assert "| total PSS of all worker processes, " in table and "| ≤ 1.5 GB | met |" in table
    assert "announce p99" in table and "load average" in table and table.endswith("PASS")


def test_the_cli_offers_many_and_soak_takes_a_pool() -> None:
    output = CliRunner().invoke(app, ["many", "--help"]).output
    for option in ("--runs", "--processes", "--concurrency", "--stream-seconds"):
        assert option in output
    assert "--pool" in CliRunner().invoke(app, ["soak", "--help"]).output
    refused = CliRunner().invoke(app, ["soak", "--pool", "both"])
    assert refused.exit_code == 2 and "choose from fork, threads" in refused.output
