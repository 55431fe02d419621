"""Every ``fanbot`` command's help in one style: typer's, flags shown as flags (never
``<bool>``), internal options hidden; ``fanbot worker`` parses its options as typer does."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from bot.cli.root import app
from tests.cli_support import worker_options


def _commands() -> list[list[str]]:
    """Every command path: ``[]`` (fanbot itself), ``["worker"]``, ``["bench", "compare"]`` …"""
    found: list[list[str]] = [[]]
    group = typer.main.get_command(app)
    with group.make_context("fanbot", [], resilient_parsing=True) as ctx:
        for name in group.list_commands(ctx):  # type: ignore[attr-defined]
            command = group.get_command(ctx, name)  # type: ignore[attr-defined]
            found.append([name])
            if hasattr(command, "list_commands"):
                with command.make_context(name, [], resilient_parsing=True) as sub:
                    found += [[name, n] for n in command.list_commands(sub)]
    return found


COMMANDS = _commands()


def _help(path: list[str]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="fanbot", terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_listed() -> None:
    assert {"console", "gateway", "worker", "doctor"} <= {p[0] for p in COMMANDS if p}
    assert ["bench", "compare"] in COMMANDS and ["subagents", "list"] in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "fanbot")
def test_help_shows_flags_as_flags(path: list[str]) -> None:
    text = _help(path)
    assert "<bool>" not in text, text
    assert f"Usage: fanbot {' '.join(path)}".rstrip() in text, text


def test_worker_help_is_typers_without_its_internal_option() -> None:
    text = _help(["worker"])
    for option in ("--count", "--pool", "--concurrency", "--metrics-port", "--no-maintenance"):
        assert option in text, (option, text)
    assert "--parent-pid" not in text
    assert "[default: 4]" in text  # as the deploy files and guides run it
    assert "worker" in _help([]) and "--parent-pid" not in _help([])


def test_worker_options_parse_as_before() -> None:
    options = worker_options(["--count", "3", "--pool", "fork", "--parent-pid", "42",
                              "--no-maintenance", "--burst"])  # fmt: skip
    assert (options.count, options.pool, options.parent_pid) == (3, "fork", 42)
    assert options.no_maintenance and options.burst and not options.single
    assert worker_options([]).count == 4


@pytest.mark.parametrize(
    "argv", [["--count", "0"], ["--pool", "forks"], ["--concurrency", "0"], ["--bogus"]]
)
def test_worker_refuses_bad_options(argv: list[str]) -> None:
    result = CliRunner().invoke(app, ["worker", *argv], prog_name="fanbot", terminal_width=200)
    assert result.exit_code == 2, result.output  # before any start-up: a usage error
    assert argv[0] in result.output and "Traceback" not in result.output, result.output
