"""``fanbot bench map`` measures a real spawn and stop in this process (and the static rows)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bot.bench.bench_commands import app
from bot.bench.path_trace import trace_paths

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]  # it starts a redis-server


def test_the_traced_paths_reach_the_announce_and_count_modules_and_commands() -> None:
    report = trace_paths()
    assert "result of alpha task" in report.announce
    assert "bot/gateway/ingress.py" in report.spawn or len(report.spawn) > 20
    assert any(m.startswith("workers/") for m in report.spawn)  # the turn ran in-process
    assert any(m.startswith("adapters/slack/") for m in report.spawn)
    assert not any(m.startswith(("bot/testing/", "bot/bench/")) for m in report.spawn)
    assert 0 < len(report.stop) < len(report.spawn)
    assert report.stop_store.commands > 0 and report.stop_store.run_reads > 0
    # The idle window sees only background loops (which ones depends on timing: a slow
    # Redis probe takes the watch's back-off step), never the handling of a message.
    assert len(report.idle) < len(report.spawn)
    assert "bot/gateway/ingress.py" not in report.idle and "workers/jobs.py" not in report.idle


def test_the_command_prints_every_row_without_paths() -> None:
    result = CliRunner().invoke(app, ["map", "--no-paths"])
    assert result.exit_code == 0, result.output
    for row in ("core (", "raw Redis client uses", "import cycles between modules",
                "import cycles between packages", "module names shared", "top level",
                "duplicates pairs", "run title sites"):  # fmt: skip
        assert row in result.output
