"""What the ops page shows, read from the stores in one go (sync: call it in a thread)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.deps import Deps
from bot.store.dead_letters import DeadLetter
from bot.store.jobs import QueueOverview, WorkerInfo
from bot.types import RunRecord

MAX_RUNS = 300
MAX_DEAD_LETTERS = 100


@dataclass(frozen=True, kw_only=True)
class PageSnapshot:
    """Everything one page render needs, read at ``now``.

    Attributes:
        now: Unix time of the read.
        runs: Live runs and the ones that ended within the recent window.
        line: Job ids of the runs waiting to start, in the order they will start.
        queues: RQ queue lengths and registries.
        workers: RQ workers registered in Redis.
        dead: The newest dead letters, newest first.
        dead_total: How many dead letters there are.
    """

    now: float
    runs: tuple[RunRecord, ...]
    line: tuple[str, ...]
    queues: tuple[QueueOverview, ...]
    workers: tuple[WorkerInfo, ...]
    dead: tuple[DeadLetter, ...]
    dead_total: int


def take(deps: Deps, *, recent_seconds: float, now: float | None = None) -> PageSnapshot:
    """Read a :class:`PageSnapshot` through the stores (blocking Redis calls)."""
    now = time.time() if now is None else now
    dead = deps.dead_letters
    return PageSnapshot(
        now=now,
        runs=tuple(_runs(deps, since=now - recent_seconds)),
        line=tuple(deps.jobs.subagent_line()),
        queues=tuple(deps.jobs.queue_overview()),
        workers=tuple(deps.jobs.workers()),
        dead=tuple(dead.recent(MAX_DEAD_LETTERS)),
        dead_total=dead.count(),
    )


def _runs(deps: Deps, *, since: float) -> list[RunRecord]:
    ids = deps.runs.active_ids() | set(deps.runs.recent_ids(MAX_RUNS))
    records = deps.runs.get_many(sorted(ids))
    shown = [r for r in records if not r.status.terminal or (r.ended_at or 0) >= since]
    return sorted(shown, key=lambda r: r.created_at)[-MAX_RUNS:]


def replay(deps: Deps, entry_id: str | None) -> tuple[int, int]:
    """Replay one dead letter (``entry_id``) or all (None): ``(replayed, not replayed)``."""
    dead = deps.dead_letters
    if entry_id is None:
        return dead.replay()
    done = dead.replay_one(entry_id)
    return (1, 0) if done else (0, 1)
