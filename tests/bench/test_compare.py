"""``fanbot bench compare`` with tiny numbers: every row of the table, and sane values.

Behaviour, not timings: each figure exists on the side it belongs to, is positive and
finite, and the killed run ended ``unknown`` (the phase raises otherwise).
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from bot.bench.bench_commands import app
from bot.bench.compare import run_compare
from bot.bench.compare_env import CompareConfig
from bot.bench.compare_report import ROWS, CompareResult

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def test_quick_compare_fills_every_row(tmp_path: Path) -> None:
    config = CompareConfig(
        workers=2, repeat=1, burst=2, samples=1, makespan_runs=3, model_seconds=0.2,
        throughput_runs=4, log_dir=tmp_path,
    )  # fmt: skip
    result = await run_compare(config)
    table = result.table()
    for row in ROWS:
        assert row.fanbot in table, table
        fanbot = result.values(row.key, "fanbot")
        assert len(fanbot) == 1 and math.isfinite(fanbot[0]) and fanbot[0] > 0, table
        if row.bare:
            bare = result.values(row.key, "bare")
            assert len(bare) == 1 and math.isfinite(bare[0]) and bare[0] > 0, table
            assert result.ratio(row) is not None, table
    # A makespan is never shorter than the ideal waves; a process holds some memory.
    assert result.values("makespan", "fanbot")[0] >= 0.99, table
    assert result.values("makespan", "bare")[0] >= 0.99, table
    assert result.values("pss_idle", "fanbot")[0] > 1024 * 1024, table
    assert "CPUs, Python" in table and "load average" in table, table


def test_plot_draws_or_says_matplotlib_is_missing(tmp_path: Path) -> None:
    result = CompareResult(
        figures={"pss_idle": {"fanbot": [50e6], "bare": [25e6]}},
        samples={"spawn1": {"fanbot": [0.05, 0.06], "bare": [0.01]}},
        timeline={"fanbot": [(0.0, 2.1), (0.1, 2.2)], "bare": [(0.0, 2.0)]},
        machine={}, parameters={},
    )  # fmt: skip
    png = tmp_path / "compare.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.plot(png) is False
        assert not png.exists()
    else:
        assert result.plot(png) is True
        assert png.read_bytes().startswith(b"\x89PNG")


def test_the_cli_offers_compare() -> None:
    output = CliRunner().invoke(app, ["compare", "--help"]).output
    assert "--quick" in output and "--plot" in output and "--repeat" in output


def test_only_refuses_an_unknown_figure_group() -> None:
    result = CliRunner().invoke(app, ["compare", "--only", "spawn,latency"])
    assert result.exit_code == 2
    assert "unknown --only latency" in result.output and "announce" in result.output


async def test_only_measures_just_the_chosen_figures(tmp_path: Path) -> None:
    config = CompareConfig(
        workers=2, repeat=1, burst=2, samples=1, only=frozenset({"memory"}), log_dir=tmp_path,
    )  # fmt: skip
    result = await run_compare(config)
    assert result.values("pss_idle", "fanbot") and result.values("pss_idle", "bare")
    assert not result.values("spawn1", "fanbot") and not result.values("makespan", "fanbot")


@pytest.mark.parametrize(
    "command",
    [
        "compare --workers 2 --only makespan --runs 200",
        "soak --workers 2 --runs 2000 --hang-rate 0 --max-delay 0.2",
    ],
    ids=["compare", "soak"],
)
def test_sigterm_ends_a_benchmark_and_every_process_it_started(
    tmp_path: Path, command: str
) -> None:
    """SIGTERM (or Ctrl-C) mid-run: the benchmark stops at its next wait, its private Redis,
    worker pools and gateway are ended, it says so and exits 1; nothing is left running."""
    err_path = tmp_path / "stderr.txt"
    argv = [
        sys.executable,
        "-m",
        "bot",
        "bench",
        *command.split(),
        "--log-dir",
        str(tmp_path / "logs"),
    ]
    with err_path.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 120
        while len(started := psutil.Process(proc.pid).children(recursive=True)) < 5:
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        time.sleep(6)  # under way: runs spawned and executing
        started = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 1, err_path.read_text()
    finally:
        proc.kill()
        proc.wait()
    assert "interrupted; its processes are stopped" in err_path.read_text()
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == []
