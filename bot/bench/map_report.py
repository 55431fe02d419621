"""The table ``fanbot bench map`` prints: static figures and the traced paths, one per line.

What each row counts is said in :mod:`bot.bench.code_map` (static) and
:mod:`bot.bench.path_trace` (the paths, by running them); each row names its goal.

To measure an older checkout, load these four files over its ``bot`` package (see
:func:`report`: nothing here depends on the older tree's module names)::

    cd <old checkout> && PYTHONPATH=$PWD python -c "import importlib.util as u, sys, bot.bench
    for n in ('code_map', 'trace_hooks', 'path_trace', 'map_report'):
        s = u.spec_from_file_location('bot.bench.' + n, '<this checkout>/bot/bench/' + n + '.py')
        m = sys.modules[s.name] = u.module_from_spec(s); s.loader.exec_module(m)
    m.report(print)"
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from bot.bench.code_map import StaticMap, count_lines, static_map
from bot.bench.path_trace import PathReport, checkout_root, trace_paths


def report(echo: Callable[[str], object], *, paths: bool = True, verbose: bool = False) -> None:
    """Measure the checkout whose ``bot`` package is imported, one line at a time."""
    root = checkout_root()
    echo(f"checkout: {root}")
    for line in static_lines(static_map(root)):
        echo(line)
    if paths:
        traced = trace_paths()
        for line in path_lines(root, traced) + (detail_lines(traced) if verbose else []):
            echo(line)


def _modules(root: Path, files: Sequence[str]) -> str:
    return f"{len(files)} modules / {count_lines(root / f for f in files):,} lines"


def _cycles(found: list[tuple[str, ...]]) -> str:
    return f"{len(found)}" + (f" ({'; '.join(' <-> '.join(c) for c in found)})" if found else "")


def static_lines(figures: StaticMap) -> list[str]:
    """The static rows."""
    shared = ", ".join(f"{name} ×{n}" for name, n in figures.shared.items()) or "none"
    dups = "not measured" if figures.duplicates is None else str(figures.duplicates)
    return [
        f"core (bot/ - testing, bench, demo; adapters/; workers/): "
        f"{figures.core[0]} modules / {figures.core[1]:,} lines",
        f"  bot/ alone (- testing, bench, demo): "
        f"{figures.bot_core[0]} modules / {figures.bot_core[1]:,} lines",
        f"all of bot/ + adapters/ + workers/: "
        f"{figures.everything[0]} modules / {figures.everything[1]:,} lines",
        f"raw Redis client uses outside bot/store/ (deps.redis): "
        f"{figures.raw_redis[0]} in {figures.raw_redis[1]} files (goal 0)",
        f"import cycles between modules: {_cycles(figures.module_cycles)} (goal 0)",
        f"import cycles between packages: {_cycles(figures.package_cycles)} (goal 0)",
        f"module names shared in bot/: {len(figures.shared)} ({shared}) (goal 0)",
        f"modules at the top level of bot/: {figures.top_level} (goal ≤ 15)",
        f"duplicates pairs in production code: {dups} (goal ≤ 30)",
        f'run title sites (f"#{{…seq}}"): {figures.titles[0]} in {figures.titles[1]} files '
        f"(goal 1)",
    ]


def _beyond_idle(report: PathReport, files: Sequence[str]) -> str:
    rest = len(set(files) - set(report.idle))
    return f"{rest} of them not among the {len(report.idle)} that also run when idle"


def path_lines(root: Path, report: PathReport) -> list[str]:
    """The traced rows."""
    store = report.stop_store
    return [
        f"Slack message spawning one subagent -> announce: {_modules(root, report.spawn)} "
        f"(goal ≤ 35 modules); {_beyond_idle(report, report.spawn)}",
        f"/subagents stop N -> reply and announce: {_modules(root, report.stop)} "
        f"(goal ≤ 15 modules); {_beyond_idle(report, report.stop)}",
        f"  store calls of that stop: {store.round_trips} round trips, {store.commands} Redis "
        f"commands (goal ≤ 6); run record named {store.run_record}×, read {store.run_reads}× "
        f"(goal 1); all commands in the window {store.window_commands}",
    ]


def detail_lines(report: PathReport) -> list[str]:
    """``--verbose``: the modules of each path and the stop's commands."""
    return [
        "spawn path modules: " + " ".join(report.spawn),
        "idle modules: " + " ".join(report.idle),
        "stop path modules: " + " ".join(report.stop),
        "stop commands: " + " ".join(report.stop_store.names),
    ]
