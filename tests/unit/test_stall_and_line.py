"""Pure decisions of the stall watchdog and the fair line for subagent slots."""

from __future__ import annotations

import pytest

from bot.runs.line import place_text
from bot.runs.stall import Stall, StallLimits, grace_text, judge, stall_note
from bot.steps import Meter
from bot.store.fair import Line, line_order, next_session

LIMITS = StallLimits(quiet=300, in_tool=900, grace=30)


@pytest.mark.parametrize(
    ("quiet_for", "in_tool", "verdict"),
    [
        (0, False, Stall.MOVING),
        (299.9, False, Stall.MOVING),
        (300, False, Stall.GRACE),
        (329.9, False, Stall.GRACE),
        (330, False, Stall.STALLED),
        (600, True, Stall.MOVING),  # a tool call gets the longer limit
        (900, True, Stall.GRACE),
        (930, True, Stall.STALLED),
    ],
)
def test_judge(quiet_for: float, in_tool: bool, verdict: Stall) -> None:
    assert judge(quiet_for=quiet_for, in_tool=in_tool, limits=LIMITS) is verdict


def test_grace_and_note_texts() -> None:
    assert (
        grace_text(quiet_for=300, in_tool=False, limits=LIMITS)
        == "no progress for 5m00s; ending in 30s unless it moves"
    )
    note = stall_note(
        quiet_for=331, activity="tool web_fetch started", tool="web_fetch", limits=LIMITS
    )
    assert note == (
        "stalled: no model output and no tool event for 5m31s inside tool web_fetch "
        "(last activity: tool web_fetch started; limit 15m00s + 30s grace)"
    )


def test_meter_touch_records_life_and_the_tool_in_flight() -> None:
    meter = Meter()
    before = meter.last_activity
    meter.touch("tool ls started", tool="ls")
    assert meter.in_tool == "ls" and meter.activity == "tool ls started"
    meter.touch("model output")
    assert meter.in_tool == "ls" and meter.last_activity >= before
    meter.touch("tool ls finished", tool="")
    assert meter.in_tool == ""


def line(held: dict[str, int], served: dict[str, float], waiting: dict[str, list[str]]) -> Line:
    return Line(held=held, served=served, waiting=waiting)


@pytest.mark.parametrize(
    ("state", "cap", "expected"),
    [
        # A holds every slot and has a backlog; B, waiting with none, goes first
        (line({"A": 4}, {"A": 9, "B": 8.5}, {"A": ["a1", "a2"], "B": ["b1"]}), None, "B"),
        # equal holdings: the one served longer ago
        (line({"A": 1, "B": 1}, {"A": 3, "B": 2}, {"A": ["a"], "B": ["b"]}), None, "B"),
        # equal everything: by name, so every process agrees
        (line({}, {"A": 1, "B": 1}, {"A": ["a"], "B": ["b"]}), None, "A"),
        # both at the cap: nobody; B at its cap: A, though B was served longer ago
        (line({"A": 2, "B": 2}, {"A": 5, "B": 1}, {"A": ["a"], "B": ["b"]}), 2, None),
        (line({"A": 1, "B": 2}, {"A": 5, "B": 1}, {"A": ["a"], "B": ["b"]}), 2, "A"),
        (line({}, {}, {"A": []}), None, None),
    ],
)
def test_next_session(state: Line, cap: int | None, expected: str | None) -> None:
    assert next_session(state, state.held, cap) == expected


def test_line_order_interleaves_sessions_and_puts_capped_ones_last() -> None:
    state = line({"A": 2}, {"A": 4, "B": 3.5}, {"A": ["a1", "a2", "a3"], "B": ["b1", "b2"]})
    assert line_order(state) == ["b1", "b2", "a1", "a2", "a3"]
    capped = line({"A": 2}, {"A": 4, "B": 3.5}, {"A": ["a1", "a2"], "B": ["b1"]})
    assert line_order(capped, cap=2) == ["b1", "a1", "a2"]


def test_place_text() -> None:
    assert place_text(1) == "queued · #1 in line"
