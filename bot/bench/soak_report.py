"""The soak benchmark's figures: counting announces, the checks, and the printed table."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from bot.bench.probes import Streams
from bot.bench.soak_plan import PlannedRun
from bot.testing.fake_telegram import SentMessage
from bot.types import RunRecord

MIB = 1024 * 1024
_VERBS = "finished|failed|timed out|was stopped|ended unexpectedly"  # bot.runs.render.ENDED_VERBS
SOAK_LABEL = r"soak-\d+"
_STATUS_LINE = re.compile(r"^Status: (\w+)$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Announce:
    label: str
    topic: int | None
    status: str


def announces(messages: list[SentMessage], *, label: str = SOAK_LABEL) -> list[Announce]:
    """The announces of runs whose label matches ``label`` (a regular expression) among the
    messages the bot sent (status messages are not)."""
    pattern = re.compile(rf'^\S+ Subagent #\d+ "({label})" \(.*\) (?:{_VERBS})')
    found = []
    for message in messages:
        head = pattern.match(message.text)
        if head is None:
            continue
        status = _STATUS_LINE.search(message.text)
        found.append(
            Announce(
                label=head[1],
                topic=message.message_thread_id,
                status=status[1] if status else "?",
            )
        )
    return found


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """How the announces of the planned runs compare with what reached Telegram."""

    not_terminal: list[str]
    not_announced: list[str]
    duplicated: dict[str, int]
    misrouted: list[str]
    wrong_status: list[str]
    stray: int

    @property
    def lost(self) -> list[str]:
        return sorted(set(self.not_terminal) | set(self.not_announced))


def compare(
    plan: list[PlannedRun], records: dict[str, RunRecord], sent: list[Announce]
) -> Delivery:
    by_label: dict[str, list[Announce]] = {}
    for item in sent:
        by_label.setdefault(item.label, []).append(item)
    planned = {run.label: run for run in plan}
    not_terminal = [r.label for r in plan if not _terminal(records.get(r.label))]
    return Delivery(
        not_terminal=not_terminal,
        not_announced=[r.label for r in plan if r.label not in by_label],
        duplicated={k: len(v) for k, v in by_label.items() if k in planned and len(v) > 1},
        misrouted=[
            a.label for a in sent if a.label in planned and a.topic != planned[a.label].topic
        ],
        wrong_status=[
            a.label
            for a in sent
            if a.label in records and a.status != records[a.label].status.value
        ],
        stray=sum(1 for a in sent if a.label not in planned),
    )


def _terminal(record: RunRecord | None) -> bool:
    return record is not None and record.status.terminal


@dataclass(frozen=True, kw_only=True)
class Rss:
    """Resident set sizes (bytes) of one process kind, summed over its processes."""

    start: int
    warm: int
    end: int
    processes: int

    @property
    def growth(self) -> int:
        """Growth past warm-up (the first tenth of the runs): a leak grows with the runs;
        warming up does not (caches filled, and a threads-pool process's thread stacks and
        Redis connections made, once)."""
        return self.end - self.warm


@dataclass(kw_only=True)
class SoakResult:
    """Every figure of one soak; :meth:`failures` says which checks failed."""

    parameters: dict[str, str]
    plan: Counter[str]
    statuses: Counter[str]
    unexpected: dict[str, tuple[str, str]]  # label -> (expected, actual)
    delivery: Delivery
    spawn_seconds: float
    terminal_seconds: float
    announced_seconds: float
    timed_out: bool
    memory: dict[str, int]  # phase -> used_memory bytes
    streams: Streams
    archive_left: int
    archived: int
    gateway_rss: Rss
    worker_rss: Rss
    rss_bound: int
    model_requests: int
    model_unknown: int
    model_max_in_flight: int
    telegram: dict[str, int]
    rq_failed: int
    logs: dict[str, Counter[str]]
    census: dict[str, tuple[int, int]]
    gateway_exit: int | None = None
    log_dir: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return sum(self.plan.values())

    @property
    def lost(self) -> int:
        return len(self.delivery.lost)

    @property
    def duplicates(self) -> int:
        return len(self.delivery.duplicated)

    def per_minute(self, seconds: float) -> float:
        return self.runs / seconds * 60 if seconds > 0 else 0.0

    def failures(self) -> list[str]:
        """The checks that failed (empty: the soak passed)."""
        d = self.delivery
        problems = []
        if self.lost:
            problems.append(f"{self.lost} run(s) lost: {', '.join(d.lost[:10])}")
        if self.duplicates:
            problems.append(f"{self.duplicates} run(s) announced more than once: {d.duplicated}")
        if d.misrouted:
            problems.append(f"{len(d.misrouted)} announce(s) in the wrong topic")
        if self.streams.dead_letters:
            problems.append(f"{self.streams.dead_letters} dead letter(s)")
        for name, rss in (("gateway", self.gateway_rss), ("workers", self.worker_rss)):
            if rss.growth > self.rss_bound:
                problems.append(f"{name} RSS grew {rss.growth / MIB:.1f} MiB (bound {self._bound})")
        return problems

    @property
    def _bound(self) -> str:
        return f"{self.rss_bound / MIB:.0f} MiB"

    def table(self) -> str:
        """The figures as an aligned two-column table."""
        rows = list(self._rows())
        width = max(len(name) for name, _ in rows if name)
        lines = []
        for name, value in rows:
            lines.append(f"{name:<{width}}  {value}" if name else value)
        return "\n".join(lines)

    def _rows(self) -> list[tuple[str, str]]:
        d = self.delivery
        rows: list[tuple[str, str]] = [("", "== soak: parameters ==")]
        rows += list(self.parameters.items())
        rows += [("planned runs", _counts(self.plan)), ("", "== results ==")]
        rows += [
            ("runs/minute (to terminal)", f"{self.per_minute(self.terminal_seconds):.1f}"),
            ("runs/minute (to announced)", f"{self.per_minute(self.announced_seconds):.1f}"),
            ("spawn 1st..last", f"{self.spawn_seconds:.1f} s"),
            ("spawn -> all terminal", f"{self.terminal_seconds:.1f} s"),
            ("spawn -> all announced", f"{self.announced_seconds:.1f} s"),
            ("gave up waiting", "yes" if self.timed_out else "no"),
            ("status histogram", _counts(self.statuses)),
            ("status other than planned", _unexpected(self.unexpected)),
            ("lost", f"{self.lost} (not terminal {len(d.not_terminal)}, "
             f"terminal but not announced {len(set(d.not_announced) - set(d.not_terminal))})"),
            ("duplicated announces", str(self.duplicates)),
            ("announces in wrong topic", str(len(d.misrouted))),
            ("announce status != record", str(len(d.wrong_status))),
            ("announces of unknown runs", str(d.stray)),
            ("dead letters", str(self.streams.dead_letters)),
            ("outbox stream length", f"{self.streams.outbox} (pending {self.streams.outbox_pending})"),
            ("progress stream length", str(self.streams.progress)),
            ("archived transcripts", f"{self.archived} (still due {self.archive_left})"),
            ("rq failed jobs", str(self.rq_failed)),
        ]  # fmt: skip
        rows += [("", "== memory ==")]
        rows += [(f"redis used_memory {k}", _mib(v)) for k, v in self.memory.items()]
        kept = self.memory.get("after archive", 0) - self.memory.get("before", 0)
        rows += [("redis growth per run (kept)", f"{kept / max(1, self.runs) / 1024:.1f} KiB")]
        rows += [
            (f"{name} RSS start/warm/end", _rss(rss))
            for name, rss in (("gateway", self.gateway_rss), ("workers", self.worker_rss))
        ]
        bound = f"{self._bound} each for the gateway and all workers, warm -> end"
        rows += [("RSS growth bound", bound)]
        rows += [("", "== traffic and logs ==")]
        rows += [
            ("model requests", f"{self.model_requests} (not from a planned run: {self.model_unknown})"),
            ("model calls in flight, max", str(self.model_max_in_flight)),
            ("telegram", ", ".join(f"{k} {v}" for k, v in self.telegram.items())),
        ]  # fmt: skip
        rows += [(f"{name} log", _counts(c) or "clean") for name, c in self.logs.items()]
        if self.gateway_exit is not None:
            rows.append(("gateway exit code (SIGTERM)", str(self.gateway_exit)))
        rows += [("", "== redis keys at the end (top 12 by bytes) ==")]
        top = sorted(self.census.items(), key=lambda kv: -kv[1][1])[:12]
        rows += [(shape, f"{count} keys, {_mib(size)}") for shape, (count, size) in top]
        rows += [("", f"note: {n}") for n in self.notes]
        if self.log_dir:
            rows.append(("logs", self.log_dir))
        problems = self.failures()
        verdict = "PASS" if not problems else "FAIL: " + "; ".join(problems)
        rows.append(("", f"== {verdict} =="))
        return rows


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))


def _unexpected(items: dict[str, tuple[str, str]]) -> str:
    if not items:
        return "0"
    shown = ", ".join(f"{k} {exp}->{act}" for k, (exp, act) in list(items.items())[:5])
    return f"{len(items)} ({shown}{', …' if len(items) > 5 else ''})"


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB" if size >= MIB else f"{size / 1024:.1f} KiB"


def _rss(rss: Rss) -> str:
    return (
        f"{_mib(rss.start)} / {_mib(rss.warm)} / {_mib(rss.end)} "
        f"(growth {rss.growth / MIB:+.1f} MiB, {rss.processes} process(es))"
    )
