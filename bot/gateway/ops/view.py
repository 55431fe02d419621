"""The ops page as plain values: a :class:`PageSnapshot` in, display rows out (pure).

Runs are shown as trees under the thread (requester session) they came from. A run's
parent is the run whose child session spawned it (``parent.child_session_key ==
run.session_key``): with ``max_spawn_depth`` 1 there is none and every tree is one level
deep; nested runs hang under their orchestrator without any change here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bot.config import Settings
from bot.gateway.ops.snapshot import PageSnapshot
from bot.prices import estimate_cost
from bot.runs.naming import run_title
from bot.runs.render import token_split, token_total
from bot.store.dead_letters import DeadLetter
from bot.store.jobs import QueueOverview, WorkerInfo
from bot.text.units import ago, duration
from bot.types import RunRecord, RunStatus

PREVIEW_CHARS = 160


@dataclass(frozen=True, kw_only=True)
class RunRow:
    run_id: str
    name: str
    agent: str
    status: str
    age: str
    runtime: str
    model: str
    tokens: str
    cost: str
    position: int | None
    """Place in the line of runs waiting to start (1 = next), for queued runs."""
    resumes: int = 0
    """Times it went on after its worker was lost."""


@dataclass(frozen=True, kw_only=True)
class RunNode:
    row: RunRow
    children: tuple[RunNode, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ThreadGroup:
    session_key: str
    where: str
    live: int
    nodes: tuple[RunNode, ...]


@dataclass(frozen=True, kw_only=True)
class WorkerRow:
    name: str
    state: str
    queues: str
    current: str
    heartbeat: str
    host: str


@dataclass(frozen=True, kw_only=True)
class DeadRow:
    entry_id: str
    age: str
    kind: str
    key: str
    where: str
    reason: str
    preview: str
    replayable: bool


@dataclass(frozen=True, kw_only=True)
class Page:
    groups: tuple[ThreadGroup, ...]
    running: int
    queued: int
    queues: tuple[QueueOverview, ...]
    workers: tuple[WorkerRow, ...]
    dead: tuple[DeadRow, ...]
    dead_total: int
    resumed: int = 0
    """Runs shown that went on after their worker was lost."""


def build_page(snapshot: PageSnapshot, *, settings: Settings) -> Page:
    """Every section of the page from one snapshot."""
    now = snapshot.now
    line = {job_id: i + 1 for i, job_id in enumerate(snapshot.line)}
    rows = {
        r.run_id: run_row(r, now=now, settings=settings, position=line.get(r.job_id))
        for r in snapshot.runs
    }
    by_run = {r.run_id: r for r in snapshot.runs}
    return Page(
        groups=group_runs(snapshot.runs, rows),
        running=sum(r.status is RunStatus.RUNNING for r in snapshot.runs),
        queued=sum(r.status is RunStatus.QUEUED for r in snapshot.runs),
        queues=snapshot.queues,
        workers=tuple(worker_row(w, now=now, runs=by_run) for w in snapshot.workers),
        dead=tuple(dead_row(d, now=now) for d in snapshot.dead),
        dead_total=snapshot.dead_total,
        resumed=sum(r.resumes > 0 for r in snapshot.runs),
    )


def run_row(record: RunRecord, *, now: float, settings: Settings, position: int | None) -> RunRow:
    usage = record.usage
    cost = record.cost_usd
    if cost is None and usage.total:
        cost = estimate_cost(settings, record.model, usage)
    started = record.started_at
    ended = record.ended_at if record.status.terminal else None
    return RunRow(
        run_id=record.run_id,
        name=run_title(record, noun="", name="plain"),
        agent=f"{record.agent_id}/{record.subagent_type}",
        status=record.status.value,
        age=duration(now - record.created_at),
        runtime=duration((ended or now) - started) if started else "–",
        model=record.model,
        tokens=f"{token_total(usage)} ({token_split(usage)})",
        cost="–" if cost is None else f"${cost:.4f}",
        position=position if record.status is RunStatus.QUEUED else None,
        resumes=record.resumes,
    )


def group_runs(runs: Sequence[RunRecord], rows: Mapping[str, RunRow]) -> tuple[ThreadGroup, ...]:
    """Top-level runs grouped by requester session, each with its nested runs below it;
    groups with live runs first, then the most recent."""
    parent_of_session = {r.child_session_key: r.run_id for r in runs}
    children: dict[str, list[RunRecord]] = {}
    top: dict[str, list[RunRecord]] = {}
    for run in sorted(runs, key=lambda r: (r.created_at, r.seq)):
        parent = parent_of_session.get(run.session_key)
        if parent is not None and parent != run.run_id:
            children.setdefault(parent, []).append(run)
        else:
            top.setdefault(run.session_key, []).append(run)

    def node(run: RunRecord, depth: int = 0) -> RunNode:
        below = children.get(run.run_id, []) if depth < 16 else []
        return RunNode(row=rows[run.run_id], children=tuple(node(c, depth + 1) for c in below))

    groups = [
        ThreadGroup(
            session_key=key,
            where=where(members[0]),
            live=sum(not r.status.terminal for r in members),
            nodes=tuple(node(r) for r in members),
        )
        for key, members in top.items()
    ]
    newest = {key: max(r.created_at for r in members) for key, members in top.items()}
    groups.sort(key=lambda g: (g.live == 0, -newest[g.session_key]))
    return tuple(groups)


def where(record: RunRecord) -> str:
    """``slack C123 / 1700000000.1`` : the thread a run reports to."""
    t = record.thread
    return f"{t.platform} {t.chat}" + (f" / {t.thread}" if t.thread else "")


def worker_row(worker: WorkerInfo, *, now: float, runs: Mapping[str, RunRecord]) -> WorkerRow:
    job = worker.current_job
    current = "–"
    if job:
        run = runs.get(job)
        current = run_title(run, noun="run", name="plain") if run is not None else f"job {job}"
    beat = worker.last_heartbeat
    return WorkerRow(
        name=worker.name,
        state=worker.state,
        queues=", ".join(worker.queues),
        current=current,
        heartbeat="never" if beat is None else ago(now - beat),
        host=worker.host,
    )


def dead_row(letter: DeadLetter, *, now: float) -> DeadRow:
    fields = letter.fields
    millis = int(letter.entry_id.partition("-")[0] or 0)
    row = DeadRow(
        entry_id=letter.entry_id,
        age=duration(now - millis / 1000),
        kind="?",
        key="",
        where="?",
        reason=fields.get("reason", ""),
        preview="",
        replayable="data" in fields,
    )
    try:
        data = json.loads(fields["data"])
        thread = data["thread"]
        text = " ".join(str(data.get("text", "")).split())
        return replace(
            row,
            kind=str(data.get("kind", "reply")),
            key=str(data.get("idempotency_key") or ""),
            where=f"{thread['platform']} {thread['chat']}"
            + (f" / {thread['thread']}" if thread.get("thread") else ""),
            preview=text[:PREVIEW_CHARS] + ("…" if len(text) > PREVIEW_CHARS else ""),
        )
    except (KeyError, TypeError, ValueError):
        return row
