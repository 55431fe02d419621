"""What a session's main agent is doing (thinking or waiting for its subagents), decided
once in :mod:`bot.runs.turn_state`, and how the console's live area says it."""

from __future__ import annotations

import dataclasses
import io

import pytest

from adapters.console.channel import ConsoleChannel
from adapters.console.convert import LiveRun, LiveView, live_lines, turn_doing
from bot.console.app import live_view
from bot.console.live_runs import InFlight
from bot.runs.turn_state import THINKING, TurnState, decide
from bot.store.joins import JoinRecord
from bot.types import RunRecord, RunStatus
from tests.unit.test_console_render import record

KEY = "agent:main:console:console:thread:main"


def join(state: str, *pending: str) -> JoinRecord:
    return JoinRecord(join_id=f"j-{state}", state=state, session_key=KEY, round=1, pending=pending)


@pytest.mark.parametrize(
    ("turns", "joins", "state"),
    [
        (0, [], None),
        (1, [], THINKING),
        # A turn in flight calls the model, even while its spawns run.
        (1, [join("open", "r1", "r2")], THINKING),
        (2, [join("sealed", "r1")], THINKING),
        # Its turn ended: the main agent waits for the runs still pending.
        (0, [join("sealed", "r3", "r1", "r2")], TurnState(waiting_for=("r1", "r2", "r3"))),
        (0, [join("open", "r1")], TurnState(waiting_for=("r1",))),
        (
            0,
            [join("sealed", "r1"), join("sealed", "r1", "r4")],
            TurnState(waiting_for=("r1", "r4")),
        ),
        # Every run ended: the continuation is on its way (thinking again).
        (0, [join("fired")], THINKING),
        (0, [join("fired"), join("sealed", "r9")], THINKING),
        (0, [join("sealed")], THINKING),
        # Joins that lead nowhere any more.
        (0, [join("started"), join("cancelled", "r1")], None),
    ],
)
def test_decide(turns: int, joins: list[JoinRecord], state: TurnState | None) -> None:
    assert decide(turns, joins) == state
    if state is not None:
        assert state.thinking is (not state.waiting_for)


@pytest.mark.parametrize(
    ("numbers", "doing"),
    [
        ((), "fanbot is thinking"),
        ((4,), "waiting for subagent #4"),
        ((1, 2, 3), "waiting for 3 subagents (#1, #2, #3)"),
        ((1, 2, 3, 4, 5, 6, 7), "waiting for 7 subagents (#1, #2, #3, #4, #5, …)"),
    ],
)
def test_turn_doing(numbers: tuple[int, ...], doing: str) -> None:
    assert turn_doing(numbers) == doing


def test_live_lines_say_waiting_instead_of_thinking() -> None:
    run = LiveRun(thread="main", title='Subagent #2 "Outline"', running=True, since=1000.0)
    view = LiveView(runs=(run,), thinking=frozenset({"main", "work"}), waiting={"main": (1, 2, 3)})
    lines = live_lines(
        view,
        now=1020.0,
        status_texts={},
        thinking_since={"main": 1000.0, "work": 1017.0},
        show_thread=True,
    )
    assert lines == [
        "[main] … waiting for 3 subagents (#1, #2, #3) · 20s",
        "[work] … fanbot is thinking · 3s",
        '[main] ⏳ Subagent #2 "Outline" — running · 20s',
    ]


def snapshot(states: dict[str, TurnState], runs: tuple[RunRecord, ...]) -> InFlight:
    return InFlight(
        runs=runs,
        roots={r.run_id: KEY for r in runs},
        turns=frozenset(states),
        states=states,
    )


def test_live_view_names_the_unfinished_runs_waited_for() -> None:
    runs = (record(1, RunStatus.RUNNING), record(3, RunStatus.QUEUED))
    # run2 ended between the reads: it is no longer waited for.
    waiting = TurnState(waiting_for=("run1", "run2", "run3"))
    view = live_view(snapshot({KEY: waiting}, runs), thread_of={KEY: "main"}, status_ids={})
    assert view.thinking == {"main"} and view.waiting == {"main": (1, 3)}
    view = live_view(snapshot({KEY: THINKING}, runs), thread_of={KEY: "main"}, status_ids={})
    assert view.thinking == {"main"} and view.waiting == {}
    # Every run waited for ended: shown as thinking (the continuation is next).
    ended = TurnState(waiting_for=("run9",))
    view = live_view(snapshot({KEY: ended}, runs), thread_of={KEY: "main"}, status_ids={})
    assert view.waiting == {}
    other = live_view(snapshot({"k": waiting}, runs), thread_of={KEY: "main"}, status_ids={})
    assert other.thinking == set() and other.waiting == {}


def test_the_live_area_times_thinking_and_waiting_each_from_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("adapters.console.channel.time.time", lambda: clock[0])
    channel = ConsoleChannel(stdin=io.StringIO(), stdout=io.StringIO(), interactive=False)
    thinking = LiveView(thinking=frozenset({"main"}))
    waiting = dataclasses.replace(thinking, waiting={"main": (1, 2)})

    def shown(view: LiveView, at: float) -> str:
        clock[0] = at
        channel.show_live(view)
        (line,) = channel._live_lines()
        return line

    assert shown(thinking, 1000.0) == "… fanbot is thinking · 0s"
    assert shown(thinking, 1004.0) == "… fanbot is thinking · 4s"
    assert shown(waiting, 1005.0) == "… waiting for 2 subagents (#1, #2) · 0s"
    assert shown(waiting, 1025.0) == "… waiting for 2 subagents (#1, #2) · 20s"
    assert shown(thinking, 1026.0) == "… fanbot is thinking · 0s"
    assert shown(thinking, 1029.0) == "… fanbot is thinking · 3s"
    clock[0] = 1030.0
    channel.show_live(LiveView())
    assert channel._live_lines() == []
