"""The lost-job repair's decision table (pure): what a sweep does about one slot holder."""

from __future__ import annotations

from typing import Any

import pytest

from bot.store.rq_layout import LaneHolder
from workers.repair import Action, decide

NOW = 1_000.0
GRACE = 10.0


def holder(status: str | None, **fields: Any) -> LaneHolder:
    return LaneHolder(job_id="j1", lane="turn:s", status=status, origin="turns", **fields)


CASES = [
    # (what the sweep saw, what it does)
    pytest.param(holder("queued", in_queue=True), Action.KEEP, id="waiting in its queue"),
    pytest.param(
        holder("queued", in_queue=True, lost_since=NOW - 99), Action.KEEP, id="found again"
    ),
    pytest.param(
        holder("queued", executing=True, worker_alive=True),
        Action.KEEP,
        id="a live worker is starting it",
    ),
    pytest.param(holder("queued"), Action.NOTE, id="lost: first sight"),
    pytest.param(
        holder("queued", executing=True, worker_alive=False),
        Action.NOTE,
        id="lost: its worker died before the horse started",
    ),
    pytest.param(
        holder("queued", lost_since=NOW - GRACE + 0.1), Action.WAIT, id="lost: within the grace"
    ),
    pytest.param(holder("queued", lost_since=NOW - GRACE), Action.REQUEUE, id="lost: grace over"),
    pytest.param(
        holder("queued", executing=True, worker_alive=False, lost_since=NOW - 60),
        Action.REQUEUE,
        id="lost: dead worker's execution, grace over",
    ),
    pytest.param(
        holder("queued", executing=True, worker_alive=True, lost_since=NOW - 60),
        Action.KEEP,
        id="never requeue what a live worker holds",
    ),
    pytest.param(holder("started", executing=True), Action.KEEP, id="executing"),
    pytest.param(
        holder("started", executing=True, worker_alive=False),
        Action.KEEP,
        id="worker gone but heartbeat deadline ahead: its horse may still run",
    ),
    pytest.param(holder("started"), Action.ABANDON, id="started, execution expired"),
    pytest.param(
        holder("started", lost_since=NOW - 60), Action.ABANDON, id="started is never requeued"
    ),
    pytest.param(holder("finished"), Action.RELEASE, id="finished"),
    pytest.param(holder("failed"), Action.RELEASE, id="failed"),
    pytest.param(holder("stopped"), Action.RELEASE, id="stopped"),
    pytest.param(holder("canceled"), Action.RELEASE, id="canceled"),
    pytest.param(holder("rate_limited"), Action.RELEASE, id="stale: waiting yet holding"),
    pytest.param(holder(None), Action.RELEASE, id="job gone"),
]


@pytest.mark.parametrize(("seen", "expected"), CASES)
def test_decide(seen: LaneHolder, expected: Action) -> None:
    assert decide(seen, now=NOW, grace=GRACE) is expected
