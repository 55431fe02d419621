"""The console's pure parts: local commands, the live area, markdown for the terminal, the
wording of Ctrl-C / Ctrl-D, and which runs are the console's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from adapters.console.convert import (
    LiveRun,
    LiveView,
    is_threads_command,
    live_lines,
    ordinal_in_line,
    run_detail,
    switch_target,
    thread_ref,
    thread_usage,
    threads_listing,
)
from adapters.console.richtext import announce_parts, renderable, to_ansi
from bot.config import demo_delay
from bot.console.app import (
    busy_message,
    endpoints_line,
    live_view,
    session_prefix,
    subagents_hint,
)
from bot.console.live_runs import InFlight, ours, stopping_line, waiting_line
from bot.errors import ConfigError
from bot.sessions import requester_session_key
from bot.text.units import duration
from bot.types import Outbound, OutboundKind, RunRecord, RunStatus

# -- typed lines -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "target", "usage"),
    [
        (":thread work", "work", False),
        (":thread", None, True),
        ("  :thread   ", None, True),
        (":thread a b", None, True),
        (":threads", None, False),
        ("tell me about :thread", None, False),
        ("hello", None, False),
    ],
)
def test_thread_lines(line: str, target: str | None, usage: bool) -> None:
    assert switch_target(line) == target
    answer = thread_usage(line, current="main")
    assert (answer is not None) is usage
    if answer:
        assert "`:thread NAME`" in answer and "`main`" in answer


# -- the live area ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0.4, "0s"), (7.9, "7s"), (75, "1m15s"), (3725, "1h02m")]
)
def test_elapsed(seconds: float, shown: str) -> None:
    assert duration(seconds, floor=True) == shown


@pytest.mark.parametrize(
    ("n", "shown"),
    [(1, "next in line"), (2, "2nd in line"), (3, "3rd in line"), (11, "11th in line")],
)
def test_place_in_line(n: int, shown: str) -> None:
    assert ordinal_in_line(n) == shown


RUN = LiveRun(thread="main", title='Subagent #2 "Outline"', running=True, since=1000.0)


@pytest.mark.parametrize(
    ("run", "status", "detail"),
    [
        (RUN, None, "running"),
        (RUN, '⏳ Subagent #2 "Outline" — started', "started"),
        (
            RUN,
            '⏳ [explore] Subagent #2 "Outline" — step 1 · 🔧 current_time · 99 tokens · 1 tool, 0.4s',
            "step 1 · 🔧 current_time · 99 tokens · 1 tool",
        ),
        (
            RUN,
            '⏳ Subagent #2 "Outline" — step 9 · answering · 9 tokens · 12 tools, 1m02s',
            "step 9 · answering · 9 tokens · 12 tools",
        ),
        (RUN, '⏳ Subagent #9 "Other" — started', "running"),
        (dataclasses.replace(RUN, running=False, position=2), None, "queued, 2nd in line"),
        (dataclasses.replace(RUN, running=False), None, "queued"),
    ],
)
def test_run_detail(run: LiveRun, status: str | None, detail: str) -> None:
    assert run_detail(run, status) == detail


def test_live_lines_tick_from_the_start_time() -> None:
    view = LiveView(runs=(dataclasses.replace(RUN, status_id="console-7"),))
    status = {
        "console-7": '⏳ Subagent #2 "Outline" — step 1 · answering · 10 tokens · 0 tools, 0.2s'
    }

    def at(now: float) -> list[str]:
        return live_lines(view, now=now, status_texts=status, thinking_since={}, show_thread=False)

    assert at(1003.2) == [
        '⏳ Subagent #2 "Outline" — step 1 · answering · 10 tokens · 0 tools · 3s'
    ]
    assert at(1064.0) == [
        '⏳ Subagent #2 "Outline" — step 1 · answering · 10 tokens · 0 tools · 1m04s'
    ]


def test_live_lines_show_thinking_threads_first() -> None:
    view = LiveView(runs=(RUN,), thinking=frozenset({"main"}))
    lines = live_lines(
        view, now=1010.0, status_texts={}, thinking_since={"main": 1005.0}, show_thread=True
    )
    assert lines == [
        "[main] … fanbot is thinking · 5s",
        '[main] ⏳ Subagent #2 "Outline" — running · 10s',
    ]


def record(seq: int, status: RunStatus, **kw: object) -> RunRecord:
    base: dict[str, object] = dict(
        run_id=f"run{seq}",
        seq=seq,
        session_key="agent:main:console:console:thread:main",
        child_session_key=f"agent:main:subagent:{seq}",
        session_id=f"s{seq}",
        thread=thread_ref("main"),
        requester="console:you",
        agent_id="main",
        subagent_type="general-purpose",
        task="t",
        model="m",
        label=f"L{seq}",
        status=status,
        created_at=100.0 + seq,
        job_id=f"run{seq}",
    )
    base.update(kw)
    return RunRecord(**base)  # type: ignore[arg-type]


def test_live_view_from_a_snapshot() -> None:
    key = "agent:main:console:console:thread:main"
    running = record(1, RunStatus.RUNNING, started_at=150.0)
    queued = record(2, RunStatus.QUEUED)
    nested = record(3, RunStatus.RUNNING, session_key=running.child_session_key, started_at=160.0)
    snapshot = InFlight(
        runs=(running, queued, nested),
        roots={"run1": key, "run2": key, "run3": key},
        turns=frozenset({key}),
        line=("other", "run2"),
    )
    view = live_view(snapshot, thread_of={key: "main"}, status_ids={"run1": "console-3"})
    assert view.thinking == {"main"}
    assert [
        (r.title, r.running, r.since, r.position, r.status_id, r.thread) for r in view.runs
    ] == [
        ('[general-purpose] Subagent #1 "L1"', True, 150.0, None, "console-3", "main"),
        ('[general-purpose] Subagent #2 "L2"', False, 102.0, 2, None, "main"),
        ('[general-purpose] Subagent #3 "L3"', True, 160.0, None, None, "main"),
    ]


def test_the_consoles_runs_include_nested_ones_only() -> None:
    key = "agent:main:console:console:thread:main"
    mine = record(1, RunStatus.RUNNING)
    nested = record(2, RunStatus.QUEUED, session_key=mine.child_session_key)
    done = record(3, RunStatus.SUCCESS)
    other = record(4, RunStatus.RUNNING, session_key="agent:main:slack:C1:thread:1")
    assert ours([nested, other, done, mine], [key]) == {"run1": key, "run2": key}


# -- what Ctrl-C and Ctrl-D say ------------------------------------------------------------


def snap(runs: int = 0, turns: int = 0) -> InFlight:
    return InFlight(
        runs=tuple(record(i, RunStatus.RUNNING) for i in range(runs)),
        turns=frozenset(f"k{i}" for i in range(turns)),
    )


@pytest.mark.parametrize(
    ("snapshot", "line"),
    [
        (snap(3), "Stopping 3 runs and the workers… (Ctrl-C again to force)"),
        (snap(1), "Stopping 1 run and the workers… (Ctrl-C again to force)"),
        (snap(0, 1), "Stopping fanbot's answer and the workers… (Ctrl-C again to force)"),
        (snap(2, 1), "Stopping fanbot's answer, 2 runs and the workers… (Ctrl-C again to force)"),
        (snap(), "Stopping the workers… (Ctrl-C again to force)"),
    ],
)
def test_stopping_line(snapshot: InFlight, line: str) -> None:
    assert stopping_line(snapshot) == line


@pytest.mark.parametrize(
    ("snapshot", "line"),
    [
        (snap(2), "Waiting for 2 runs to finish… Ctrl-C to stop them"),
        (snap(1), "Waiting for 1 run to finish… Ctrl-C to stop it"),
        (snap(0, 1), "Waiting for fanbot's answer… Ctrl-C to stop it"),
        (snap(3, 1), "Waiting for fanbot's answer and 3 runs… Ctrl-C to stop them"),
        (snap(), None),
    ],
)
def test_waiting_line(snapshot: InFlight, line: str | None) -> None:
    assert waiting_line(snapshot) == line


def test_busy_message_names_the_holder_and_a_way_out() -> None:
    assert busy_message(Path("/s/fanbot"), 42) == (
        "Another fanbot console is using /s/fanbot (pid 42); "
        "use FANBOT_STATE_DIR=/s/fanbot-2 for a second one."
    )


@pytest.mark.parametrize(("raw", "value"), [("", None), ("2.5", 2.5), (" 0 ", 0.0)])
def test_demo_delay(raw: str, value: float | None) -> None:
    assert demo_delay({"FANBOT_DEMO_SUBAGENT_DELAY": raw}) == value


@pytest.mark.parametrize("raw", ["soon", "-1", "1e9", "nan"])
def test_demo_delay_rejects_nonsense(raw: str) -> None:
    with pytest.raises(ConfigError, match="FANBOT_DEMO_SUBAGENT_DELAY"):
        demo_delay({"FANBOT_DEMO_SUBAGENT_DELAY": raw})


# -- markdown on the terminal --------------------------------------------------------------


def shown(kind: OutboundKind, text: str, *, show_thread: bool = False) -> str:
    message = Outbound(thread=thread_ref("main"), text=text, kind=kind)
    return to_ansi(renderable(message, show_thread=show_thread), width=100, color=False)


def test_reply_markdown_is_rendered_beside_the_label() -> None:
    out = shown(OutboundKind.REPLY, "**Result** is *here*\nnext `code` line")
    assert out.splitlines() == ["fanbot › Result is here", "         next code line"]


def test_announce_lines_stay_lines() -> None:
    text = (
        '✅ Subagent #1 "Research" (general-purpose) finished\nStatus: success\nResult:\n'
        "**Result** for: x\n\n- one\n- two\nNotes: Notes: *as is*\nruntime 2s · tokens 3"
    )
    assert shown(OutboundKind.ANNOUNCE, text).splitlines() == [
        "",
        '✅ Subagent #1 "Research" (general-purpose) finished',
        "  Status: success",
        "  Result:",
        "  Result for: x",
        "",
        "   • one",
        "   • two",
        "  Notes: Notes: *as is*",
        "  runtime 2s · tokens 3",
    ]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("H\nStatus: s\nResult: r\nruntime 1s", ("H", "Status: s\nResult: r", "", "runtime 1s")),
        (
            "H\nStatus: s\nResult:\nNotes: in the result\n- x\nNotes: n\nmore n\nruntime 1s",
            (
                "H",
                "Status: s\nResult:\nNotes: in the result\n- x",
                "Notes: n\nmore n",
                "runtime 1s",
            ),
        ),
        ("H", ("H", "", "", "")),
    ],
)
def test_announce_parts(text: str, parts: tuple[str, str, str, str]) -> None:
    assert announce_parts(text) == parts


def test_brackets_and_colons_are_text_and_headings_stay_left() -> None:
    out = shown(OutboundKind.REPLY, "# Title\n[bold]x[/bold] :smile:", show_thread=True)
    assert out.splitlines()[0] == "[main] fanbot › Title"
    assert "[bold]x[/bold] :smile:" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_colour_output_has_no_trailing_padding() -> None:
    message = Outbound(thread=thread_ref("main"), text="hi **there**")
    out = to_ansi(renderable(message, show_thread=False), width=80)
    assert "\x1b[1m" in out and not out.endswith(" ") and "   \x1b" not in out


# -- issue 30: :threads, the hint, the endpoints line, a failed turn's mark -------------------


@pytest.mark.parametrize(
    ("line", "listed"),
    [(":threads", True), ("  :threads ", True), (":threads x", False), (":thread", False)],
)
def test_threads_command(line: str, listed: bool) -> None:
    assert is_threads_command(line) is listed


def test_threads_listing_marks_the_current_one_and_counts() -> None:
    text = threads_listing({"main": (7, 3), "work": (1, 0)}, current="new", typed={"new", "main"})
    assert text.splitlines() == [
        "Threads (`:thread NAME` switches; `*` is this one):",
        "* `new` — 0 messages, no runs",
        "- `main` — 7 messages, 3 runs",
        "- `work` — 1 message, no runs",
    ]


def test_the_console_thread_sessions_share_one_prefix() -> None:
    prefix = session_prefix("main")
    assert prefix == "agent:main:console:console:thread:"
    key = requester_session_key(agent_id="main", thread=thread_ref("a:b*c"))
    assert key == prefix + "a:b*c"


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        (None, "fanbot subagents list --all"),
        (
            "unix:///home/me/.local/state/fanbot/redis/redis.sock",
            "FANBOT_REDIS_URL=unix:///home/me/.local/state/fanbot/redis/redis.sock "
            "fanbot subagents list --all",
        ),
        (
            "unix:///my state/redis/redis.sock",
            "FANBOT_REDIS_URL='unix:///my state/redis/redis.sock' fanbot subagents list --all",
        ),
    ],
)
def test_the_hint_names_the_consoles_redis(url: str | None, hint: str) -> None:
    assert subagents_hint(url) == hint


def test_the_endpoints_line() -> None:
    assert endpoints_line("127.0.0.1", None) is None
    assert endpoints_line("127.0.0.1", 41234) == (
        "Health and metrics: http://127.0.0.1:41234/healthz, /readyz, /metrics"
    )


def test_a_failed_turns_reply_keeps_its_mark_through_the_outbox() -> None:
    thread = thread_ref("main")
    failed = Outbound(thread=thread, text="⚠ The model call failed", failed=True)
    assert Outbound.from_json(failed.to_json()) == failed
    plain = Outbound(thread=thread, text="hi")
    assert "failed" not in plain.to_json()
    assert Outbound.from_json(plain.to_json()).failed is False
