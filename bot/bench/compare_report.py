"""The table (and optional plot) of ``fanbot bench compare``: the goals, each pool's
figures beside bare RQ's, and which goals each pool met.

Every figure is one value per repetition; the table shows min / median / p99 of them per
side, the ratio of the medians to bare RQ's, and met / missed against the row's goal (on
the medians). Pure formatting: no I/O but the optional PNG.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bot.bench.stats import percentile

MIB = 1024 * 1024
POOLS = ("threads", "fork")  # the pools' columns, in this order
NOT_APPLICABLE = "—"


@dataclass(frozen=True, kw_only=True)
class Goal:
    """A row's goal: its median at most (or at least) ``limit`` in the row's unit, or
    ``times_bare`` times bare RQ's median in the same run."""

    text: str
    at_most: bool = True
    limit: float | None = None
    times_bare: float | None = None

    def met(self, value: float, ratio: float | None) -> bool | None:
        """Whether ``value`` (printed unit) or ``ratio`` (to bare RQ) meets it; None: unknown."""
        if self.times_bare is not None:
            if ratio is None:
                return None
            measured, bound = ratio, self.times_bare
        else:
            assert self.limit is not None
            measured, bound = value, self.limit
        return measured <= bound if self.at_most else measured >= bound


@dataclass(frozen=True, kw_only=True)
class Row:
    """One figure: its name (``{burst}``, ``{runs}``, ``{seconds}``, ``{cap}`` and
    ``{points}`` are the run's parameters), what bare RQ measures beside it, the unit, the
    goal (None: a figure shown for context), and the pools it applies to."""

    key: str
    name: str
    bare: str
    unit: str  # "ms", "s", "MB", "x ideal", "/min", "commands"
    goal: Goal | None
    scale: float = 1.0  # seconds -> ms, bytes -> MB
    pools: tuple[str, ...] = POOLS
    digits: int | None = None  # decimals shown (default: by size)


ROWS = (
    Row(key="spawn1", name="spawn → first model request p50, 1 spawn",
        bare="enqueue → job start", unit="ms", scale=1000,
        goal=Goal(text="≤ 0.5× bare RQ", times_bare=0.5)),
    Row(key="spawnN", name="spawn → first model request p50, {burst} at once",
        bare="enqueue → job start", unit="ms", scale=1000,
        goal=Goal(text="≤ 1.0× bare RQ", times_bare=1.0)),
    Row(key="announce50",
        name="model returns → announce accepted by the platform, {burst} ending in one "
        "thread, p50", bare="XADD → XREADGROUP", unit="ms", scale=1000,
        goal=Goal(text="≤ 5 ms", limit=5)),
    Row(key="announce99",
        name="model returns → announce accepted by the platform, {burst} ending in one "
        "thread, p99", bare="XADD → XREADGROUP", unit="ms", scale=1000,
        goal=Goal(text="≤ 20 ms", limit=20)),
    Row(key="makespan", name="makespan {runs} × {seconds} s at cap {cap}",
        bare="sleeping jobs", unit="x ideal", digits=3,
        goal=Goal(text="≤ 1.02× the ideal of whole waves", limit=1.02)),
    Row(key="pss_idle", name="idle worker process PSS", bare="idle rq worker", unit="MB",
        scale=1 / MIB, goal=None),
    Row(key="pss_run", name="PSS added per running subagent, {cap} at once",
        bare="a bare rq horse", unit="MB", scale=1 / MIB, goal=None),
    Row(key="pss_slope",
        name="PSS per running subagent (slope at {points} runs in one process)", bare="",
        unit="MB", scale=1 / MIB, goal=Goal(text="≤ 1 MB", limit=1), pools=("threads",)),
    Row(key="throughput", name="runs/minute, instant model", bare="no-op jobs/minute",
        unit="/min", goal=Goal(text="≥ 1.5× bare RQ no-op jobs", at_most=False, times_bare=1.5)),
    Row(key="stop99", name="`/subagents stop` → stopped, p99",
        bare="stop-job command → job stopped, p99", unit="ms", scale=1000,
        goal=Goal(text="≤ bare RQ's stop in the same run", times_bare=1.0)),
    Row(key="kill", name="worker process SIGKILLed → every run it held ended (or resumed)",
        bare="", unit="s", goal=Goal(text="≤ 1.5 s", limit=1.5)),
    Row(key="commands",
        name="Redis commands per subagent run, spawn → announce delivered (INFO "
        "commandstats delta ÷ runs, idle traffic subtracted)",
        bare="per no-op job", unit="commands", goal=Goal(text="≤ 80", limit=80)),
)  # fmt: skip


def spread(values: list[float], scale: float, digits: int | None = None) -> str:
    """``min / median / p99`` of per-repetition values, scaled; one value prints once."""
    if not values:
        return "-"
    scaled = [v * scale for v in values]
    if len(scaled) == 1:
        return _num(scaled[0], digits)
    low, mid = min(scaled), statistics.median(scaled)
    shown = (_num(v, digits) for v in (low, mid, percentile(scaled, 0.99)))
    return " / ".join(shown)


def _num(value: float, digits: int | None = None) -> str:
    if digits is not None:
        return f"{value:.{digits}f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass(frozen=True, kw_only=True)
class CompareResult:
    """Figures per row key and side (a pool, ``threads`` or ``fork``, or ``bare``), one value
    per repetition; lines printed under the table (``details``), the parameters the rows'
    names show (``names``), the raw latency samples and the last makespan's run spans
    (start, end) for the plot."""

    figures: dict[str, dict[str, list[float]]]
    machine: dict[str, str]
    parameters: dict[str, str]
    details: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # for the plot
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def values(self, key: str, side: str) -> list[float]:
        return self.figures.get(key, {}).get(side, [])

    @property
    def pools(self) -> list[str]:
        """The pools measured, in :data:`POOLS` order."""
        return [p for p in POOLS if any(p in sides for sides in self.figures.values())]

    def ratio(self, row: Row, side: str) -> float | None:
        """``side``'s median over bare RQ's, or None."""
        mine, bare = self.values(row.key, side), self.values(row.key, "bare")
        if not mine or not bare or statistics.median(bare) == 0:
            return None
        return float(statistics.median(mine) / statistics.median(bare))

    def met(self, row: Row, side: str) -> bool | None:
        """Whether ``side`` met ``row``'s goal (None: no goal, not measured, or n/a)."""
        values = self.values(row.key, side)
        if row.goal is None or side not in row.pools or not values:
            return None
        return row.goal.met(statistics.median(values) * row.scale, self.ratio(row, side))

    def name(self, row: Row) -> str:
        return row.name.format_map(_Names(self.names))

    def rows(self, *, goals: bool = True) -> list[list[str]]:
        """Per row: the figure, each pool's value, bare RQ's, then (``goals``) the goal and
        each pool's verdict."""
        found = []
        for row in ROWS:
            cells = [f"{self.name(row)} [{row.unit}]"]
            cells += [self._value(row, side) for side in self.pools]
            bare = self.values(row.key, "bare")
            shown = spread(bare, row.scale, row.digits)
            cells.append(f"{row.bare}: {shown}" if row.bare else NOT_APPLICABLE)
            if goals:
                cells.append(row.goal.text if row.goal else NOT_APPLICABLE)
                cells += [_verdict(self.met(row, side)) for side in self.pools]
            found.append(cells)
        return found

    def verdicts(self) -> tuple[list[str], list[str]]:
        """The goals met and the goals missed, each ``"<figure> (<pool> pool): <goal>"``."""
        met: list[str] = []
        missed: list[str] = []
        for row in ROWS:
            for side in self.pools:
                verdict = self.met(row, side)
                if verdict is not None and row.goal is not None:
                    text = f"{self.name(row)} ({side} pool): {row.goal.text}"
                    (met if verdict else missed).append(text)
        return met, missed

    def _value(self, row: Row, side: str) -> str:
        if side not in row.pools:
            return NOT_APPLICABLE
        shown = spread(self.values(row.key, side), row.scale, row.digits)
        ratio = self.ratio(row, side)
        return f"{shown} ({ratio:.2f}x)" if ratio is not None else shown

    def table(self, *, goals: bool = True) -> str:
        """A Markdown table of the figures and (``goals``) each pool's verdict on each goal,
        the goals missed, then details, the machine and the parameters."""
        pools = self.pools
        head = ["figure", *(f"fanbot {p} pool" for p in pools), "bare RQ / Redis"]
        if goals:
            head += ["goal", *(f"{p}: goal" for p in pools)]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cells) + " |" for cells in self.rows(goals=goals)]
        lines.append("")
        if goals:
            met, missed = self.verdicts()
            lines.append(f"Goals: {len(met)} met, {len(missed)} missed.")
            lines += [f"- missed: {text}" for text in missed]
        lines.append("Values: min / median / p99 over repetitions (one repetition: its value); "
                     "(Nx): median over bare RQ's median; goals judged on the medians.")  # fmt: skip
        lines += [f"- {name}: {text}" for name, text in sorted(self.details.items())]
        lines += self._breakdown()
        for name, value in {**self.machine, **self.parameters}.items():
            lines.append(f"- {name}: {value}")
        return "\n".join(lines)

    def _breakdown(self) -> list[str]:
        """Where an announce's time goes: in the worker (model returns -> the run's
        finalize) and after it (outbox -> gateway -> platform)."""
        lines = []
        for side in self.pools:
            for total_key, part_key, first, then in (
                ("spawn1", "to_start", "spawn → run marked running",
                 "running → first model request"),
                ("announce", "to_finalize", "model returns → run finalized",
                 "finalized → accepted by the platform"),
            ):  # fmt: skip
                total = self.samples.get(total_key, {}).get(side, [])
                part = self.samples.get(part_key, {}).get(side, [])
                if total and part:
                    head, whole = statistics.median(part) * 1000, statistics.median(total) * 1000
                    lines.append(f"- {total_key}, {side}, medians: {first} {head:.1f} ms, "
                                 f"{then} {whole - head:.1f} ms")  # fmt: skip
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
        sides = [*self.pools, "bare"]
        fig, axes = plt.subplots(2, 4, figsize=(20, 8))
        for axis, (key, title) in zip(axes[0], _LATENCIES, strict=True):
            data = {s: [v * 1000 for v in self.samples.get(key, {}).get(s, [])] for s in sides}
            shown = [side for side in sides if data[side]]
            axis.set_title(title, fontsize=9)
            if not shown:
                continue
            axis.boxplot([data[side] for side in shown], tick_labels=shown)
            axis.set_yscale("log")
            axis.set_ylabel("ms")
        for axis, side in zip(axes[1][:3], sides, strict=False):
            spans = sorted(self.timeline.get(side, []))
            for n, (start, end) in enumerate(spans):
                axis.plot([start, end], [n, n], linewidth=1.5)
            axis.set_title(f"makespan timeline, {side} (last repetition)", fontsize=9)
            axis.set_xlabel("s since the first spawn / enqueue")
            axis.set_ylabel("run")
        rows = [r for r in ROWS if r.key in ("pss_idle", "pss_run")]
        width = 0.8 / len(sides)
        for offset, side in enumerate(sides):
            heights = [statistics.median(self.values(r.key, side) or [0.0]) / MIB for r in rows]
            axes[1][3].bar([n + offset * width for n in range(len(rows))], heights, width,
                           label=side)  # fmt: skip
        axes[1][3].set_xticks(range(len(rows)), ["idle worker", "per running run"])
        axes[1][3].set_ylabel("PSS, MB")
        axes[1][3].legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return True


class _Names(dict[str, str]):
    """The parameters a row's name shows; one not given shows as ``N``."""

    def __missing__(self, key: str) -> str:
        return "N"


def outcome(result: CompareResult, *, goals: bool) -> tuple[str, int]:
    """What ``fanbot bench compare`` prints and its exit code: 1 when ``goals`` and a pool
    missed one, else 0 (``--no-goals`` only measures)."""
    missed = goals and bool(result.verdicts()[1])
    return result.table(goals=goals), 1 if missed else 0


def _verdict(met: bool | None) -> str:
    if met is None:
        return NOT_APPLICABLE
    return "met" if met else "missed"


_LATENCIES = (
    ("spawn1", "spawn → first request (bare: enqueue → start), 1 at a time"),
    ("spawnN", "the same, a burst at once"),
    ("announce", "model returns → announce (bare: XADD → XREADGROUP)"),
    ("stop", "/subagents stop → stopped (bare: stop-job → stopped)"),
)
