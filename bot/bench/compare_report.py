"""The table (and optional plot) of ``fanbot bench compare``: fanbot / bare RQ / ratio.

Every figure is one value per repetition; the table shows min / median / p99 of them per
side, and the ratio of the medians. Pure formatting: no I/O but the optional PNG.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bot.bench.stats import percentile

MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Row:
    """One metric: what fanbot measures, what bare RQ measures, the unit and the goal."""

    key: str
    fanbot: str
    bare: str
    unit: str  # "ms", "s", "MB", "x ideal", "/min"
    goal: str
    scale: float = 1.0  # seconds -> ms, bytes -> MB


ROWS = (
    Row(key="spawn1", fanbot="spawn -> first model request, 1 spawn, p50",
        bare="enqueue -> job start", unit="ms", goal="<= 1.5x", scale=1000),
    Row(key="spawnN", fanbot="spawn -> first model request, burst at once, p50",
        bare="enqueue -> job start", unit="ms", goal="<= 2x", scale=1000),
    Row(key="announce50", fanbot="model returns -> announce accepted, p50",
        bare="XADD -> XREADGROUP", unit="ms", goal="<= 5 ms", scale=1000),
    Row(key="announce99", fanbot="model returns -> announce accepted, p99",
        bare="XADD -> XREADGROUP", unit="ms", goal="<= 20 ms", scale=1000),
    Row(key="makespan", fanbot="makespan of N runs at cap = workers",
        bare="N sleeping jobs", unit="x ideal", goal="<= 1.04x ideal"),
    Row(key="pss_idle", fanbot="idle worker process PSS",
        bare="idle rq worker", unit="MB", goal="<= 45 MB", scale=1 / MIB),
    Row(key="pss_run", fanbot="PSS added per running subagent",
        bare="a bare rq horse", unit="MB", goal="<= 8 MB", scale=1 / MIB),
    Row(key="throughput", fanbot="runs/minute, instant model",
        bare="no-op jobs/minute", unit="/min", goal=">= 0.4x"),
    Row(key="kill", fanbot="worker + horse SIGKILLed -> unknown announced",
        bare="", unit="s", goal="<= 1.5 s"),
)  # fmt: skip


def spread(values: list[float], scale: float) -> str:
    """``min / median / p99`` of per-repetition values, scaled; one value prints once."""
    if not values:
        return "-"
    scaled = [v * scale for v in values]
    if len(scaled) == 1:
        return _num(scaled[0])
    low, mid = min(scaled), statistics.median(scaled)
    return f"{_num(low)} / {_num(mid)} / {_num(percentile(scaled, 0.99))}"


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass(frozen=True, kw_only=True)
class CompareResult:
    """Figures per row key and side (``fanbot``/``bare``), one value per repetition; the raw
    latency samples and the last makespan's run spans (start, end) for the plot."""

    figures: dict[str, dict[str, list[float]]]
    machine: dict[str, str]
    parameters: dict[str, str]
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # for the plot
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def values(self, key: str, side: str) -> list[float]:
        return self.figures.get(key, {}).get(side, [])

    def ratio(self, row: Row) -> float | None:
        fanbot, bare = self.values(row.key, "fanbot"), self.values(row.key, "bare")
        if not fanbot or not bare or statistics.median(bare) == 0:
            return None
        return float(statistics.median(fanbot) / statistics.median(bare))

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """``(metric, fanbot, bare, ratio, goal)`` per row, values as printed."""
        found = []
        for row in ROWS:
            ratio = self.ratio(row)
            bare = spread(self.values(row.key, "bare"), row.scale)
            found.append((
                f"{row.fanbot} [{row.unit}]",
                spread(self.values(row.key, "fanbot"), row.scale),
                f"{row.bare}: {bare}" if row.bare else "-",
                f"{ratio:.2f}x" if ratio is not None else "",
                row.goal,
            ))  # fmt: skip
        return found

    def table(self) -> str:
        """A Markdown table, then the machine and the parameters."""
        lines = [
            "| metric | fanbot (min / median / p99) | bare RQ / Redis | ratio | goal |",
            "|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in self.rows()]
        lines.append("")
        lines += self._breakdown()
        for name, value in {**self.machine, **self.parameters}.items():
            lines.append(f"- {name}: {value}")
        return "\n".join(lines)

    def _breakdown(self) -> list[str]:
        """Where an announce's time goes: in the worker (model returns -> the run's
        finalize) and after it (outbox -> gateway -> platform)."""
        lines = []
        for total_key, part_key, first, then in (
            ("spawn1", "to_start", "spawn -> run marked running",
             "running -> first model request"),
            ("announce", "to_finalize", "model returns -> run finalized",
             "finalized -> accepted by the platform"),
        ):  # fmt: skip
            total = self.samples.get(total_key, {}).get("fanbot", [])
            part = self.samples.get(part_key, {}).get("fanbot", [])
            if total and part:
                head, whole = statistics.median(part) * 1000, statistics.median(total) * 1000
                lines.append(
                    f"- {total_key}, medians: {first} {head:.1f} ms, {then} {whole - head:.1f} ms"
                )
        return lines

    def plot(self, path: Path) -> bool:
        """Draw the latency distributions and the makespan timelines into ``path``.

        Returns False (and draws nothing) when matplotlib is not installed.
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return False
        fig, axes = plt.subplots(2, 3, figsize=(15, 8))
        for axis, (key, title) in zip(axes[0], _LATENCIES, strict=True):
            data = [[v * 1000 for v in self.samples.get(key, {}).get(s, [])] for s in _SIDES]
            axis.set_title(title, fontsize=9)
            if not all(data):
                continue
            axis.boxplot(data, tick_labels=list(_SIDES))
            axis.set_yscale("log")
            axis.set_ylabel("ms")
        for axis, side in zip(axes[1][:2], _SIDES, strict=True):
            spans = sorted(self.timeline.get(side, []))
            for n, (start, end) in enumerate(spans):
                axis.plot([start, end], [n, n], linewidth=1.5)
            axis.set_title(f"makespan timeline, {side} (last repetition)", fontsize=9)
            axis.set_xlabel("s since the first spawn / enqueue")
            axis.set_ylabel("run")
        rows = [r for r in ROWS if r.key in ("pss_idle", "pss_run")]
        for offset, side in enumerate(_SIDES):
            heights = [statistics.median(self.values(r.key, side) or [0.0]) / MIB for r in rows]
            axes[1][2].bar([n + offset * 0.4 for n in range(len(rows))], heights, 0.4, label=side)
        axes[1][2].set_xticks(range(len(rows)), ["idle worker", "per running run"])
        axes[1][2].set_ylabel("PSS, MB")
        axes[1][2].legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return True


_SIDES = ("fanbot", "bare")
_LATENCIES = (
    ("spawn1", "spawn -> first request (bare: enqueue -> start), 1 at a time"),
    ("spawnN", "the same, a burst at once"),
    ("announce", "model returns -> announce (bare: XADD -> XREADGROUP)"),
)
