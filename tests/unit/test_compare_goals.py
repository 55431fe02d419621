"""``fanbot bench compare``'s verdict: each goal met or missed per pool, exit 1 when one is
missed, ``--no-goals`` only measures (the figures here are given, nothing is run)."""

from __future__ import annotations

from bot.bench.compare_report import CompareResult, outcome

NAMES = {"burst": "8", "runs": "100", "seconds": "2", "cap": "8", "points": "0 / 100 / 200"}


def _result(spawn_threads: float, commands_fork: float) -> CompareResult:
    return CompareResult(
        figures={
            "spawn1": {"threads": [spawn_threads], "fork": [0.004], "bare": [0.01]},
            "commands": {"threads": [60.0], "fork": [commands_fork], "bare": [40.0]},
        },
        names=NAMES, machine={}, parameters={},
    )  # fmt: skip


def test_every_goal_met_exits_0_and_says_so() -> None:
    text, code = outcome(_result(0.004, 70.0), goals=True)
    assert code == 0, text
    assert "Goals: 4 met, 0 missed." in text
    assert "missed:" not in text


def test_a_missed_goal_exits_1_and_is_named_with_its_pool() -> None:
    text, code = outcome(_result(0.004, 95.0), goals=True)
    assert code == 1, text
    assert "Goals: 3 met, 1 missed." in text
    missed = [line for line in text.splitlines() if line.startswith("- missed: ")]
    assert len(missed) == 1 and missed[0].startswith("- missed: Redis commands per subagent run")
    assert missed[0].endswith("(fork pool): ≤ 80"), missed
    row = next(line for line in text.splitlines() if line.startswith("| Redis commands"))
    assert row.endswith("| ≤ 80 | met | missed |"), row


def test_each_pool_misses_on_its_own() -> None:
    text, code = outcome(_result(0.02, 95.0), goals=True)
    assert code == 1
    assert "Goals: 2 met, 2 missed." in text
    assert "spawn → first model request p50, 1 spawn (threads pool): ≤ 0.5× bare RQ" in text


def test_no_goals_only_measures() -> None:
    text, code = outcome(_result(0.02, 95.0), goals=False)
    assert code == 0, text
    head = text.splitlines()[0]
    assert head == "| figure | fanbot threads pool | fanbot fork pool | bare RQ / Redis |"
    assert "goal" not in head and "Goals:" not in text
    assert " met " not in text and "missed" not in text


def test_no_figures_no_verdict() -> None:
    empty = CompareResult(figures={}, names=NAMES, machine={}, parameters={})
    text, code = outcome(empty, goals=True)
    assert code == 0 and "Goals: 0 met, 0 missed." in text


def test_the_cli_offers_no_goals() -> None:
    from typer.testing import CliRunner

    from bot.bench.bench_commands import app

    output = CliRunner().invoke(app, ["compare", "--help"], terminal_width=200).output
    assert "--no-goals" in output and "exit 1" in output, output
