"""The chaos benchmark's figures: read from the fake model's requests, the messages the bot
sent, the page server's fetches and the run records; the goals; the printed table (one
column per pool)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bot.agent.resume import INTERRUPTED
from bot.bench.chaos_plan import NOT_REPEATABLE, TURN_REPLY, PlannedRun, label_of, step_of
from bot.bench.soak_report import announces
from bot.bench.stats import percentile
from bot.demo.replies import ChatRequest, message_text
from bot.testing.fake_telegram import SentMessage
from bot.types import RunRecord, RunStatus

CHAOS_LABEL = r"chaos-\d+"
PROCESS_GOAL = 2.0  # seconds, p99 from a process death to the next attempt's start
HOST_GOAL = 6.0  # the same after a host death
WORKER_DIED = "The worker answering this stopped working"  # bot.agent.turn.WORKER_DIED
_INTERRUPTED = INTERRUPTED[:40]
_COUNT = re.compile(r"^stdout:\n\s*(\d+)\s*$", re.MULTILINE)


@dataclass(kw_only=True)
class Hit:
    """A run a kill hit: when, which attempt it was in, and what became of it."""

    run_id: str
    kill: int  # the kill's number, from 1
    kind: str  # host or process
    killed_at: float  # time.time() just before the SIGKILL
    attempt: int  # the run's attempt when it was killed
    outcome: str = ""  # "" (watching), resumed, ended <status>, not resumed, gone
    resumed_after: float | None = None  # seconds from the kill to the next attempt's start
    noticed_after: float | None = None  # seconds from the kill to the decision to resume


@dataclass(kw_only=True)
class ChaosResult:
    """Every figure of one pool's chaos run; :meth:`goals` says which goals were met."""

    runs: int
    statuses: Counter[str]
    lost: list[str]
    duplicated: dict[str, int]
    unknown: dict[str, tuple[str, ...]]  # label -> its attempt_ends
    max_resumes: int
    deaths: Counter[str]  # label -> attempts that ended with a lost worker
    hits: list[Hit]
    model_requests: int
    repeated: Counter[str]  # label -> model calls asked again (same step)
    over_repeated: dict[str, tuple[int, int]]  # label -> (repeated, deaths), repeated > deaths
    interrupted: Counter[str]  # tool -> calls the model was told were interrupted
    rerun: dict[str, list[str]]  # tool not safe to repeat -> "label step" run twice
    refetched: int  # web_fetch pages fetched more than once (safe to repeat)
    turns: int
    turn_replies: Counter[int]  # turn -> replies naming it
    turn_lost_lines: Counter[int]  # turn -> "the worker ... stopped working" lines
    pool: str = ""
    model_unknown: int = 0
    kills: list[dict[str, object]] = field(default_factory=list)
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    parameters: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    logs: dict[str, Counter[str]] = field(default_factory=dict)
    log_dir: str = ""

    def latencies(self, kind: str) -> list[float]:
        return [
            h.resumed_after for h in self.hits if h.kind == kind and h.resumed_after is not None
        ]

    def noticed(self, kind: str) -> list[float]:
        return [
            h.noticed_after for h in self.hits if h.kind == kind and h.noticed_after is not None
        ]

    @property
    def unknown_unexplained(self) -> list[str]:
        """Runs ended ``unknown`` although their worker died no more than ``max_resumes``
        times (more is the designed ending of a run that keeps killing its worker)."""
        return [k for k in self.unknown if self.deaths[k] <= self.max_resumes]

    @property
    def not_resumed(self) -> list[Hit]:
        return [h for h in self.hits if h.outcome in ("not resumed", "")]

    def turns_once(self) -> tuple[int, int, int]:
        """Turns answered exactly once (a reply or a lost line), never, more than once."""
        once = never = twice = 0
        for n in range(self.turns):
            total = self.turn_replies[n] + self.turn_lost_lines[n]
            once += total == 1
            never += total == 0
            twice += total > 1
        return once, never, twice

    def goals(self) -> list[tuple[str, bool, str]]:
        """(goal, met?, the figure) for each goal of the issue."""
        process, host = self.latencies("process"), self.latencies("host")
        once, never, twice = self.turns_once()
        safe_interrupted = sum(n for t, n in self.interrupted.items() if t not in NOT_REPEATABLE)
        reruns = sum(len(v) for v in self.rerun.values())
        late = self.not_resumed
        return [
            ("lost runs 0", not self.lost, str(len(self.lost))),
            ("duplicated announces 0", not self.duplicated, str(len(self.duplicated))),
            (f"ended unknown 0 (worker died <= {self.max_resumes}x)",
             not self.unknown_unexplained,
             f"{len(self.unknown_unexplained)} (unknown in all: {len(self.unknown)})"),
            (f"resume p99 <= {PROCESS_GOAL:g} s, process death",
             bool(process) and percentile(process, 0.99) <= PROCESS_GOAL and not late,
             _p99(process)),
            (f"resume p99 <= {HOST_GOAL:g} s, host death",
             bool(host) and percentile(host, 0.99) <= HOST_GOAL and not late, _p99(host)),
            ("model calls repeated <= 1 per run per kill", not self.over_repeated,
             f"{len(self.over_repeated)} run(s) over"),
            ("not-safe tool calls run twice 0", reruns == 0, str(reruns)),
            ("interrupted calls reported (safe ones re-run)", safe_interrupted == 0,
             f"{sum(self.interrupted.values())} reported, {safe_interrupted} of safe tools"),
            ("turns answered exactly once", once == self.turns,
             f"{once}/{self.turns} (never {never}, twice {twice})"),
        ]  # fmt: skip

    def failures(self) -> list[str]:
        return [f"{goal}: {figure}" for goal, met, figure in self.goals() if not met]

    def rows(self) -> list[tuple[str, str]]:
        """(name, value) rows: the same names in every pool's result."""
        rows: list[tuple[str, str]] = [("", "== parameters ==")]
        rows += list(self.parameters.items())
        rows += [("", "== results ==")]
        outcomes = Counter(h.outcome for h in self.hits)
        turns_once, never, twice = self.turns_once()
        rows += [
            ("wall time", f"{self.seconds:.0f} s"),
            ("load avg (1 min) before / after", f"{self.load[0]:.2f} / {self.load[1]:.2f}"),
            ("status histogram", _counts(Counter(self.statuses))),
            ("lost (not terminal or not announced)", _some(self.lost)),
            ("duplicated announces", _some([f"{k}x{v}" for k, v in self.duplicated.items()])),
            ("ended unknown", _some([f"{k} ({len(v)} deaths)" for k, v in self.unknown.items()])),
            ("runs killed (hits by host / process kills)",
             f"{len({h.run_id for h in self.hits})} "
             f"({sum(h.kind == 'host' for h in self.hits)} / "
             f"{sum(h.kind == 'process' for h in self.hits)})"),
            ("what became of the hits", _counts(outcomes)),
            ("runs resumed (1x / 2x / more)", _resumed(self.deaths)),
            ("resume after process death", _spread(self.latencies("process"))),
            ("resume after host death", _spread(self.latencies("host"))),
            ("  of which kill -> noticed, process", _spread(self.noticed("process"))),
            ("  of which kill -> noticed, host", _spread(self.noticed("host"))),
            ("model requests", f"{self.model_requests} (unplanned {self.model_unknown})"),
            ("model calls repeated", f"{sum(self.repeated.values())} in "
             f"{len(self.repeated)} run(s); over 1 per kill: {_some(list(self.over_repeated))}"),
            ("calls reported interrupted", _counts(self.interrupted) or "0"),
            ("not-safe calls run twice", _counts(Counter({k: len(v) for k, v in self.rerun.items()}))
             or "0"),
            ("pages fetched twice (safe)", str(self.refetched)),
            ("turns: once / never / twice", f"{turns_once} / {never} / {twice} "
             f"(lost lines {sum(self.turn_lost_lines.values())})"),
            ("turns hit by kills: answered / lost line / never", self._turns_hit()),
        ]  # fmt: skip
        rows += [(f"{name} log", _counts(c) or "clean") for name, c in self.logs.items()]
        rows += [("", "== goals ==")]
        rows += [
            (goal, f"{'met' if met else 'MISSED'}: {figure}") for goal, met, figure in self.goals()
        ]
        return rows

    def _turns_hit(self) -> str:
        hit = {n for k in self.kills for n in _ints(k.get("turns"))}
        answered = sum(1 for n in hit if self.turn_replies[n])
        lost = sum(1 for n in hit if self.turn_lost_lines[n] and not self.turn_replies[n])
        never = sum(1 for n in hit if not self.turn_replies[n] and not self.turn_lost_lines[n])
        return f"{answered} / {lost} / {never} (of {len(hit)})"

    def details(self) -> list[str]:
        """The kills one per line, and the runs behind each missed goal."""
        lines = [f"kill {i}: at {k.get('at', '?')} s, {k['what']}: {k['runs']} run(s), "
                 f"turn(s) {k['turns'] or 'none'}" for i, k in enumerate(self.kills, 1)]  # fmt: skip
        for n in range(self.turns):
            got = self.turn_replies[n] + self.turn_lost_lines[n]
            if got != 1:
                lines.append(f"turn {n}: {self.turn_replies[n]} reply(ies), "
                             f"{self.turn_lost_lines[n]} lost line(s)")  # fmt: skip
        for label, ends in list(self.unknown.items())[:5]:
            lines.append(f"unknown {label}: attempt_ends {list(ends)}")
        for hit in self.not_resumed[:5]:
            lines.append(f"not resumed: run {hit.run_id} (kill {hit.kill}, {hit.kind})")
        slow = sorted((h for h in self.hits if h.resumed_after is not None),
                      key=lambda h: -(h.resumed_after or 0))[:3]  # fmt: skip
        lines += [f"slowest resume: run {h.run_id[:8]} {h.resumed_after:.2f} s after kill {h.kill} "
                  f"({h.kind}; noticed after {_seconds(h.noticed_after)})" for h in slow]  # fmt: skip
        for tool, which in self.rerun.items():
            lines.append(f"{tool} run twice: {', '.join(which[:5])}")
        for label, (n, deaths) in list(self.over_repeated.items())[:5]:
            lines.append(f"{label}: {n} model call(s) repeated, worker lost {deaths}x")
        return lines


def analyse(
    *,
    plan: list[PlannedRun],
    records: Mapping[str, RunRecord],
    requests: Sequence[ChatRequest],
    messages: Sequence[SentMessage],
    fetches: Counter[str],
    hits: list[Hit],
    turns: int,
    first_turn_chat: int,
    max_resumes: int,
) -> ChaosResult:
    """The figures of one pool's chaos run."""
    by_label = Counter(a.label for a in announces(list(messages), label=CHAOS_LABEL))
    lost = [r.label for r in plan if r.label not in records or not records[r.label].status.terminal
            or by_label[r.label] == 0]  # fmt: skip
    deaths = Counter({k: len(r.attempt_ends) for k, r in records.items() if r.attempt_ends})
    repeated, interrupted, rerun = _requests(requests)
    over = {k: (n, deaths[k]) for k, n in repeated.items() if n > deaths[k]}
    replies: Counter[int] = Counter()
    lost_lines: Counter[int] = Counter()
    for message in messages:
        n = message.chat_id - first_turn_chat
        if not 0 <= n < turns:
            continue
        if TURN_REPLY.format(n=n) in message.text:
            replies[n] += 1
        elif WORKER_DIED in message.text:
            lost_lines[n] += 1
    return ChaosResult(
        runs=len(plan),
        statuses=Counter(r.status.value for r in records.values()),
        lost=lost,
        duplicated={k: v for k, v in by_label.items() if v > 1},
        unknown={k: r.attempt_ends for k, r in records.items() if r.status is RunStatus.UNKNOWN},
        max_resumes=max_resumes,
        deaths=deaths,
        hits=hits,
        model_requests=len(requests),
        repeated=repeated,
        over_repeated=over,
        interrupted=interrupted,
        rerun=rerun,
        refetched=sum(1 for n in fetches.values() if n > 1),
        turns=turns,
        turn_replies=replies,
        turn_lost_lines=lost_lines,
    )


def _requests(
    requests: Sequence[ChatRequest],
) -> tuple[Counter[str], Counter[str], dict[str, list[str]]]:
    """Per run, the model calls asked again; per tool, the calls reported interrupted and
    (not safe to repeat) the calls whose result shows they ran twice."""
    asked: Counter[tuple[str, int]] = Counter()
    interrupted: dict[tuple[str, str], str] = {}
    twice: dict[tuple[str, str], tuple[str, int]] = {}
    for request in requests:
        label = label_of(request)
        if label is None or request.has_tool("sessions_spawn"):
            continue
        asked[label, step_of(request)] += 1
        names: dict[str, tuple[str, int]] = {}
        step = 0
        for message in request.messages:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or ():
                    names[str(call.get("id"))] = (str(call["function"]["name"]), step)
                step += 1
            if message.get("role") != "tool":
                continue
            call_id = str(message.get("tool_call_id"))
            name, at = names.get(call_id, ("?", -1))
            text = message_text(message.get("content"))
            if text.startswith(_INTERRUPTED):
                interrupted[label, call_id] = name
            elif _ran_twice(name, text):
                twice[label, call_id] = (name, at)
    repeated: Counter[str] = Counter()
    for (label, _step), n in asked.items():
        if n > 1:
            repeated[label] += n - 1
    rerun: dict[str, list[str]] = {}
    for (label, _call), (name, at) in twice.items():
        rerun.setdefault(name, []).append(f"{label} step {at}")
    return repeated, Counter(interrupted.values()), rerun


def _ran_twice(tool: str, result: str) -> bool:
    if tool == "write_file":
        return "already exists" in result
    if tool == "execute":
        found = _COUNT.search(result)
        return found is not None and int(found[1]) > 1
    return False


def _ints(value: object) -> list[int]:
    return [n for n in value if isinstance(n, int)] if isinstance(value, list) else []


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def _p99(values: list[float]) -> str:
    return f"{percentile(values, 0.99):.2f} s (n={len(values)})" if values else "no sample"


def _spread(values: list[float]) -> str:
    if not values:
        return "no sample"
    return (f"p50 {percentile(values, 0.5):.2f} s, p99 {percentile(values, 0.99):.2f} s, "
            f"max {max(values):.2f} s (n={len(values)})")  # fmt: skip


def _resumed(deaths: Counter[str]) -> str:
    by = Counter(min(n, 3) for n in deaths.values())
    return f"{by[1]} / {by[2]} / {by[3]}"


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1]))


def _some(items: list[str]) -> str:
    if not items:
        return "0"
    return f"{len(items)} ({', '.join(items[:5])}{', …' if len(items) > 5 else ''})"


def table(results: Sequence[ChaosResult]) -> str:
    """Every pool's figures side by side, then the kills and the details, then the verdict."""
    columns = [dict(r.rows()) for r in results]
    names = [name for name, _ in results[0].rows()]
    sections = [value for name, value in results[0].rows() if not name]
    width = max(len(n) for n in names if n)
    cell = max(24, *(len(v) for c in columns for k, v in c.items() if k))
    cell = min(cell, 60)
    lines = [f"{'':<{width}}  " + "  ".join(f"{r.pool:<{cell}}" for r in results)]
    section = iter(sections)
    for name in names:
        if not name:
            lines.append(next(section))
            continue
        values = [c.get(name, "") for c in columns]
        lines.append(f"{name:<{width}}  " + "  ".join(f"{v:<{cell}}" for v in values).rstrip())
    for result in results:
        lines.append(f"== {result.pool}: kills and details ==")
        lines += result.details()
        lines += [f"note: {n}" for n in result.notes]
        if result.log_dir:
            lines.append(f"logs: {result.log_dir}")
    problems = [f"{r.pool}: {p}" for r in results for p in r.failures()]
    lines.append(
        "== " + ("PASS: every goal met" if not problems else "FAIL: " + "; ".join(problems)) + " =="
    )
    return "\n".join(lines)
