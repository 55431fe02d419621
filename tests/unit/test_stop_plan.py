"""The stop's plan, decided without I/O: state in, plan out (table-tested)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.runs.approval_gate import RESUME_PREFIX
from bot.runs.stop_plan import StopPlan, StopState, plan_stop, stop_note, to_stop
from bot.text.units import duration
from bot.types import RunRecord, RunStatus, ThreadRef

NOW = 1_000.0
RAN = duration(65)  # how long RUNNING ran, as the notes show it
BY = "alice (slack:U1)"


def run(run_id: str = "r1", **kw: object) -> RunRecord:
    base = RunRecord(
        run_id=run_id,
        seq=int(kw.pop("seq", 1)),  # type: ignore[call-overload]
        session_key="s",
        child_session_key=f"s:{run_id}",
        session_id=f"sid-{run_id}",
        thread=ThreadRef(platform="slack", account="T", chat="C", thread="1.0"),
        requester="slack:U1",
        agent_id="main",
        subagent_type="general-purpose",
        task="t",
        model="m",
        job_id=f"job-{run_id}",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


RUNNING = run(status=RunStatus.RUNNING, started_at=NOW - 65, prompt_tokens=1200)
QUEUED = run()
PARKED = replace(RUNNING, parked_at=NOW - 5, approval_id="ap1")


def plan(state: StopState) -> StopPlan:
    return plan_stop(state, run_id="r1", by=BY, now=NOW)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (StopState(run=None), StopPlan(run_id="r1", was=RunStatus.UNKNOWN)),
        (
            StopState(run=replace(RUNNING, status=RunStatus.SUCCESS)),
            StopPlan(run_id="r1", was=RunStatus.SUCCESS),
        ),
        (
            StopState(run=QUEUED),
            StopPlan(
                run_id="r1",
                was=RunStatus.QUEUED,
                run=QUEUED,
                notes=f"stopped by {BY} before it started",
                cancel_job="job-r1",
            ),
        ),
        (
            StopState(run=RUNNING, steps={"sid-r1": 4}),
            StopPlan(
                run_id="r1",
                was=RunStatus.RUNNING,
                run=RUNNING,
                notes=f"stopped by {BY} after {RAN} (4 transcript message(s), 1.2k tokens so far)",
                hard_stop=True,
            ),
        ),
        (
            StopState(run=PARKED, steps={"sid-r1": 2}),
            StopPlan(
                run_id="r1",
                was=RunStatus.RUNNING,
                run=PARKED,
                notes=f"stopped by {BY} after {RAN} (2 transcript message(s), 1.2k tokens so far)",
                withdraw_approval="ap1",
                cancel_jobs=(RESUME_PREFIX + "ap1",),
            ),
        ),
        (  # parked for its children, no approval: nothing to withdraw, no job executes
            StopState(run=replace(PARKED, approval_id="")),
            StopPlan(
                run_id="r1",
                was=RunStatus.RUNNING,
                run=replace(PARKED, approval_id=""),
                notes=f"stopped by {BY} after {RAN} (0 transcript message(s), 1.2k tokens so far)",
            ),
        ),
    ],
    ids=["gone", "ended", "queued", "running", "parked-on-approval", "parked-for-children"],
)
def test_one_run(state: StopState, expected: StopPlan) -> None:
    assert plan(state) == expected


def test_the_cascade_stops_unfinished_descendants_and_cancels_only_its_own_fan_ins() -> None:
    child = run("c1", seq=2, parent_run_id="r1", status=RunStatus.RUNNING, started_at=NOW - 1)
    done = run("c2", seq=3, parent_run_id="r1", status=RunStatus.SUCCESS)
    grandchild = run("g1", seq=4, parent_run_id="c1")
    other = run("o1", seq=5)
    state = StopState(
        run=RUNNING,
        family=(grandchild, other, done, child, RUNNING),
        joins=("r1-1", "c1-1", "o1-1"),
        steps={"sid-r1": 1, "sid-c1": 3},
    )
    top = plan(state)
    assert top.cancel_joins == ("r1-1",)
    (c1,) = top.children
    assert c1.run_id == "c1" and c1.hard_stop and c1.cancel_joins == ("c1-1",)
    assert c1.notes.startswith(
        f"stopped by {BY} (its parent #1 was stopped) after {duration(1)} (3 "
    )
    (g1,) = c1.children
    assert g1.cancel_job == "job-g1" and not g1.children
    assert (
        g1.notes
        == f"stopped by {BY} (its parent #1 was stopped) (its parent #2 was stopped) before it started"
    )
    assert [r.run_id for r in to_stop(RUNNING, state.family)] == ["r1", "c1", "g1"]


@pytest.mark.parametrize(
    ("record", "note"),
    [
        (replace(RUNNING, result="half"), "; the result is partial"),
        (replace(RUNNING, result="  "), "so far)"),
        (replace(QUEUED, started_at=NOW), "before it started"),
        (replace(RUNNING, started_at=None), "before it started"),
    ],
)
def test_stop_note(record: RunRecord, note: str) -> None:
    assert stop_note(record, by=BY, steps=0, now=NOW).endswith(note)
