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


@pytest.mark.parametrize("pool", ["threads", "fork"])
async def test_quick_compare_fills_every_row(tmp_path: Path, pool: str) -> None:
    config = CompareConfig(
        workers=2, repeat=1, burst=2, samples=1, makespan_runs=3, model_seconds=0.2,
        throughput_runs=4, command_runs=4, idle_seconds=1.0, slope_points=(0, 2, 4),
        pools=(pool,), log_dir=tmp_path,
    )  # fmt: skip
    result = await run_compare(config)
    table = result.table()
    assert result.pools == [pool], table
    for row in ROWS:
        assert result.name(row) in table, table
        values = result.values(row.key, pool)
        if pool not in row.pools:
            assert values == [], table
            continue
        assert len(values) == 1 and math.isfinite(values[0]) and values[0] > 0, table
        if row.bare:
            bare = result.values(row.key, "bare")
            assert len(bare) == 1 and math.isfinite(bare[0]) and bare[0] > 0, table
            assert result.ratio(row, pool) is not None, table
        if row.goal is not None:
            assert result.met(row, pool) is not None, table
    # A makespan is never shorter than the ideal waves; a process holds some memory.
    assert result.values("makespan", pool)[0] >= 0.99, table
    assert result.values("makespan", "bare")[0] >= 0.99, table
    assert result.values("pss_idle", pool)[0] > 1024 * 1024, table
    # A run and a bare job each cost Redis commands; the top ones are named per run.
    assert result.values("commands", pool)[0] > 10, table
    assert f"Redis commands per run, {pool}: " in table, table
    assert "CPUs, Python" in table and "load average" in table, table
    # Every run the pass spawned is counted by its status: a crash would show as error.
    census = f"runs of the {pool} pool's pass, by status (stop phase: stopped, kill: unknown"
    assert census in table and "error" not in table.split(census)[1].splitlines()[0], table
    assert f"/subagents stop → stopped, {pool}: p50 " in table, table
    assert "| spawn → first model request p50, 2 at once [ms] |" in table, table
    if pool == "threads":
        assert "PSS of one threads-pool process (and its launcher): " in table, table
        assert "2 run(s) held by the killed process" in table, table


def test_the_goals_table_marks_each_pool_and_leaves_what_does_not_apply() -> None:
    result = CompareResult(
        figures={
            "spawn1": {"threads": [0.004], "fork": [0.02], "bare": [0.01]},
            "announce99": {"threads": [0.015], "fork": [0.03]},
            "pss_slope": {"threads": [0.5 * 1024 * 1024]},
            "throughput": {"threads": [3000.0], "fork": [1000.0], "bare": [1500.0]},
            "commands": {"threads": [90.0], "fork": [70.0], "bare": [60.0]},
        },
        names={"burst": "8", "runs": "100", "seconds": "2", "cap": "8", "points": "0 / 100 / 200"},
        machine={"load average (1 min)": "0.50 at start, 1.00 at end"}, parameters={},
    )  # fmt: skip
    lines = {line.split(" [")[0].removeprefix("| "): line for line in result.table().splitlines()}
    head = result.table().splitlines()[0]
    assert head == ("| figure | fanbot threads pool | fanbot fork pool | bare RQ / Redis | goal "
                    "| threads: goal | fork: goal |")  # fmt: skip
    spawn = lines["spawn → first model request p50, 1 spawn"]
    assert spawn.endswith("| 4.00 (0.40x) | 20.0 (2.00x) | enqueue → job start: 10.0 "
                          "| ≤ 0.5× bare RQ | met | missed |")  # fmt: skip
    announce = lines["model returns → announce accepted by the platform, 8 ending in one "
                     "thread, p99"]  # fmt: skip
    assert announce.endswith("| ≤ 20 ms | met | missed |")
    slope = lines["PSS per running subagent (slope at 0 / 100 / 200 runs in one process)"]
    assert slope.endswith("| 0.50 | — | — | ≤ 1 MB | met | — |")
    throughput = lines["runs/minute, instant model"]
    assert throughput.endswith("| met | missed |")
    commands = lines["Redis commands per subagent run, spawn → announce delivered (INFO "
                     "commandstats delta ÷ runs, idle traffic subtracted)"]  # fmt: skip
    assert commands.endswith("| ≤ 80 | missed | met |")
    not_measured = lines["makespan 100 × 2 s at cap 8"]
    assert not_measured.endswith("| - | - | sleeping jobs: - | ≤ 1.02× the ideal of whole "
                                 "waves | — | — |")  # fmt: skip
    assert "- load average (1 min): 0.50 at start, 1.00 at end" in result.table()


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
    assert "--pool" in output and "--processes" in output and "--concurrency" in output


def test_compare_refuses_an_unknown_pool() -> None:
    result = CliRunner().invoke(app, ["compare", "--pool", "forks"])
    assert result.exit_code == 2
    assert "unknown --pool forks; choose from threads, fork, both" in result.output


def test_only_refuses_an_unknown_figure_group() -> None:
    result = CliRunner().invoke(app, ["compare", "--only", "spawn,latency"])
    assert result.exit_code == 2
    assert "unknown --only latency" in result.output and "announce" in result.output


async def test_only_measures_just_the_chosen_figures_in_each_pool(tmp_path: Path) -> None:
    """``--pool both``: the threads pool's pass, then the fork pool's, on one Redis."""
    config = CompareConfig(
        workers=2, repeat=1, burst=2, samples=1, only=frozenset({"memory"}),
        pools=("threads", "fork"), log_dir=tmp_path,
    )  # fmt: skip
    result = await run_compare(config)
    assert result.pools == ["threads", "fork"]
    for side in ("threads", "fork"):
        assert len(result.values("pss_idle", side)) == 1
        assert not result.values("spawn1", side) and not result.values("makespan", side)
    assert len(result.values("pss_idle", "bare")) == 2  # measured again in each pass
    assert not result.values("pss_slope", "threads")  # its own figure group


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
