"""The docs' bench plot: fanbot against bare RQ / Redis, per worker pool, as an SVG.

:func:`measure` runs ``fanbot bench compare``'s comparison (:func:`bot.bench.compare.run_compare`,
the ``--pool both --quick`` sizes) and keeps its figures; :func:`draw` turns figures into
the SVG (pure: figures in, SVG text out). The figures are kept beside the plot as JSON
(``bench-compare.json``), so the plot can be redrawn without measuring again. matplotlib comes with the ``docs`` extra and is
imported only here, when the plot is drawn (docs/development.md).
"""

from __future__ import annotations

import dataclasses
import io
import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.bench.compare_report import ROWS, CompareResult, Row

COMMAND = "fanbot bench compare --pool both --quick"
SIDES = {"threads": "fanbot, threads pool", "fork": "fanbot, fork pool", "bare": "bare RQ / Redis"}
COLORS = {"threads": "#3f51b5", "fork": "#009688", "bare": "#9e9e9e"}
SHOWN = (
    "spawn1",
    "spawnN",
    "announce50",
    "stop99",
    "makespan",
    "throughput",
    "pss_run",
    "commands",
)
"""The rows plotted, one panel each (see bot/bench/compare_report.py's ROWS)."""
_TITLES = {
    "spawn1": "spawn → first model request,\n1 spawn (p50)",
    "spawnN": "spawn → first model request,\n{burst} at once (p50)",
    "announce50": "model returns → announce\naccepted, p50",
    "stop99": "/subagents stop → stopped,\np99",
    "makespan": "makespan, {runs} × {seconds} s\nat cap {cap}",
    "throughput": "runs per minute,\ninstant model",
    "pss_run": "PSS added per\nrunning run",
    "commands": "Redis commands per run,\nspawn → announce",
}
_BETTER = {"throughput": "higher is better"}


@dataclass(frozen=True, kw_only=True)
class BenchFigures:
    """What the plot needs of one comparison: per row key and side, one value per
    repetition; the parameters the titles show; the caption."""

    figures: dict[str, dict[str, list[float]]]
    names: dict[str, str]
    caption: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BenchFigures:
        """Figures saved by :meth:`to_json`; ``ValueError`` names what is wrong."""
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) != {"figures", "names", "caption"}:
            raise ValueError("not bench figures: want an object of figures, names, caption")
        figures = {
            str(key): {str(side): [float(v) for v in values] for side, values in sides.items()}
            for key, sides in data["figures"].items()
        }
        names = {str(k): str(v) for k, v in data["names"].items()}
        return cls(figures=figures, names=names, caption=str(data["caption"]))


def caption(result: CompareResult, *, date: str) -> str:
    """``<command>, <date>: <machine>; load average (1 min) <start/end>``."""
    machine = result.machine.get("machine", "")
    load = result.machine.get("load average (1 min)", "")
    return f"{COMMAND}, {date}: {machine}; load average (1 min) {load}"


def measure(*, date: str, report: Any = None) -> tuple[BenchFigures, str]:
    """Run the comparison (both pools, ``--quick`` sizes; a few minutes) and return its
    figures and the table ``fanbot bench compare`` prints."""
    import asyncio

    from bot.bench.compare import run_compare
    from bot.bench.compare_env import PHASES, CompareConfig

    with tempfile.TemporaryDirectory(prefix="fanbot-docs-bench-") as logs:
        config = CompareConfig(
            pools=("threads", "fork"),
            slope_points=(0, 20, 40),
            makespan_runs=16,
            model_seconds=0.5,
            throughput_runs=48,
            only=PHASES,
            log_dir=Path(logs),
            report=report,
        )
        result = asyncio.run(run_compare(config))
    figures = BenchFigures(
        figures=result.figures, names=result.names, caption=caption(result, date=date)
    )
    return figures, result.table(goals=True)


def _row(key: str) -> Row:
    return next(row for row in ROWS if row.key == key)


def _unit(row: Row) -> str:
    return {"x ideal": "× ideal", "/min": "runs / min"}.get(row.unit, row.unit)


def draw(bench: BenchFigures) -> str:
    """The SVG: one panel per figure, a bar per side (its median over the repetitions, the
    spread min–max as a line), the legend naming the sides, the caption under it. Text
    stays text in the SVG (searchable, small)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    keys = [k for k in SHOWN if any(bench.figures.get(k, {}).values())]
    if not keys:
        raise ValueError("no figures to plot")
    sides = [s for s in SIDES if any(bench.figures.get(k, {}).get(s) for k in keys)]
    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "fanbot"}):
        columns = 4
        rows = (len(keys) + columns - 1) // columns
        fig, axes = plt.subplots(rows, columns, figsize=(12, 3.1 * rows + 0.9), squeeze=False)
        for axis in axes.flat[len(keys) :]:
            axis.set_visible(False)
        for axis, key in zip(axes.flat, keys, strict=False):
            _panel(axis, key, bench, sides)
        handles = [Patch(color=COLORS[s]) for s in sides]
        fig.legend(handles, [SIDES[s] for s in sides], loc="upper center", ncol=len(sides),
                   frameon=False)  # fmt: skip
        note = "bar: the median over the repetitions; line: their min to max"
        fig.text(0.5, 0.01, f"{bench.caption}\n{note}", ha="center", fontsize=8, color="#555555")
        fig.tight_layout(rect=(0, 0.06, 1, 0.94))
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
        plt.close(fig)
    return out.getvalue()


def _panel(axis: Any, key: str, bench: BenchFigures, sides: list[str]) -> None:
    row = _row(key)
    title = _TITLES[key].format_map({"burst": "N", "runs": "N", "seconds": "N", "cap": "N",
                                     **bench.names})  # fmt: skip
    axis.set_title(title, fontsize=9)
    axis.set_ylabel(_unit(row) + (f" ({_BETTER[key]})" if key in _BETTER else ""))
    bare = [v * row.scale for v in bench.figures.get(key, {}).get("bare", [])]
    for n, side in enumerate(sides):
        values = [v * row.scale for v in bench.figures.get(key, {}).get(side, [])]
        if not values:
            continue
        median = statistics.median(values)
        axis.bar(n, median, color=COLORS[side], width=0.7)
        if len(values) > 1:
            axis.plot([n, n], [min(values), max(values)], color="#212121", linewidth=1)
        label = _short(median)
        if side != "bare" and bare and statistics.median(bare) > 0:
            label += f"\n{median / statistics.median(bare):.2f}× bare"
        axis.annotate(label, (n, max(values)), textcoords="offset points", xytext=(0, 3),
                      ha="center", fontsize=8)  # fmt: skip
    axis.set_xticks([])
    axis.margins(y=0.18)
    axis.spines[["top", "right"]].set_visible(False)


def _short(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
