"""``/subagents`` grammar and the list/info/log answers (pure, table-driven)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from bot.commands.answers import (
    EMPTY_LIST,
    log_line,
    render_family,
    render_info,
    render_list,
    render_log,
    spend,
)
from bot.commands.parse import parse_command
from bot.commands.registry import USAGE
from bot.commands.subagents import SubagentsRequest, parse_subagents
from bot.runs.logview import select_log, visible
from bot.runs.naming import NAME_CHARS
from bot.runs.send import continuation
from bot.types import Cleanup, RunRecord, RunStatus, ThreadRef

NOW = 1_700_000_000.0
THREAD = ThreadRef(platform="console", account="local", chat="c", thread="t")


def run(run_id: str, status: RunStatus, **kw: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": run_id,
        "seq": 1,
        "session_key": "agent:main:console:c:thread:t",
        "child_session_key": f"agent:main:subagent:{run_id}",
        "session_id": "sid-" + run_id,
        "thread": THREAD,
        "requester": "console:alice",
        "agent_id": "main",
        "subagent_type": "researcher",
        "task": "Find out everything about the thing",
        "model": "fake-model",
        "status": status,
        "created_at": NOW - 300,
    }
    values.update(kw)
    return RunRecord(**values)


PARSE_OK = [
    ("/subagents", SubagentsRequest(action="list")),
    ("/subagents list", SubagentsRequest(action="list")),
    ("/subagents LIST", SubagentsRequest(action="list")),
    ("/subagents help", SubagentsRequest(action="help")),
    ("/subagents info #2", SubagentsRequest(action="info", target="#2")),
    ("/subagents log 1", SubagentsRequest(action="log", target="1", limit=20)),
    ("/subagents log 1 50", SubagentsRequest(action="log", target="1", limit=50)),
    ("/subagents log 1 tools", SubagentsRequest(action="log", target="1", tools=True)),
    ("/subagents log last 5 tools", SubagentsRequest(action="log", target="last", limit=5, tools=True)),
    ("/subagents log 1 TOOLS 7", SubagentsRequest(action="log", target="1", limit=7, tools=True)),
    ("/subagents log 1 999", SubagentsRequest(action="log", target="1", limit=200)),
    ("/subagents send 1 hello world", SubagentsRequest(action="send", target="1", message="hello world")),
    ("/subagents send abcd  look at  B\nthen C", SubagentsRequest(action="send", target="abcd", message="look at  B\nthen C")),
    ("/subagents stop 3", SubagentsRequest(action="stop", target="3")),
    ("/subagents stop all", SubagentsRequest(action="stop", target="all")),
    ("/subagents list whatever", SubagentsRequest(action="list")),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), PARSE_OK)
def test_well_formed_requests(text: str, expected: SubagentsRequest) -> None:
    command = parse_command(text)
    assert command is not None
    assert parse_subagents(command) == expected


PARSE_BAD = [
    ("/subagents frobnicate", "I don't know `/subagents frobnicate`."),
    ("/subagents stop", "`/subagents stop` needs an id."),
    ("/subagents info", "`/subagents info` needs an id."),
    ("/subagents log", "`/subagents log` needs an id."),
    ("/subagents send", "`/subagents send` needs an id."),
    ("/subagents send 1", "`/subagents send 1` needs a message to send."),
    ("/subagents send 1    ", "`/subagents send 1` needs a message to send."),
    ("/subagents log 1 -5", "`-5` is not a valid log limit: use a number from 1 to 200"),
    ("/subagents log 1 0", "`0` is not a valid log limit"),
    ("/subagents log 1 ten", "`ten` is not a valid log limit"),
    ("/subagents log 1 99999999999", "`99999999999` is not a valid log limit"),
    ("/subagents log 1 ١٢", "is not a valid log limit"),
    ("/subagents stop 1 2", "`/subagents stop` takes one id"),
    ("/subagents info 1 2", "`/subagents info` takes one id"),
    ("/subagents `x`", "I don't know `/subagents 'x'`."),
]


@pytest.mark.parametrize(("text", "message"), PARSE_BAD)
def test_garbage_gets_usage_never_an_exception(text: str, message: str) -> None:
    command = parse_command(text)
    assert command is not None
    answer = parse_subagents(command)
    assert isinstance(answer, str)
    assert message in answer
    if "log limit" not in message:
        assert USAGE in answer


def test_list_has_counts_numbers_and_every_field() -> None:
    runs = [
        run("aaaa1111bbbb", RunStatus.RUNNING, seq=6, started_at=NOW - 62, label="Django research"),
        run("cccc2222dddd", RunStatus.QUEUED, seq=5, created_at=NOW - 5, task="x " * 100),
        run("eeee3333ffff", RunStatus.SUCCESS, seq=4, started_at=NOW - 200, ended_at=NOW - 120),
    ]
    text = render_list(runs, now=NOW)
    lines = text.splitlines()
    assert lines[0] == "**Subagents in this thread** — 2 active · 1 done"
    assert lines[1] == (
        "#6 🏃 running · Django research · running for 1m02s · 0 tok · `aaaa1111` · "
        "`agent:main:subagent:aaaa1111bbbb`"
    )
    assert lines[2].startswith("#5 ⏳ queued · x x x")
    name = lines[2].split(" · ")[1]
    assert len(name) == NAME_CHARS and name.endswith("…")
    assert "waiting for 5s" in lines[2]
    assert lines[3].startswith(
        "#4 ✅ success · Find out everything about the thing · took 1m20s, 2m00s ago"
    )


def test_list_shows_a_tree_indented_with_each_nodes_status_and_spend() -> None:
    root = run("rootaaaabbbb", RunStatus.RUNNING, seq=1, started_at=NOW - 30, label="lead")
    root = dataclasses.replace(root, parked_at=NOW - 5, prompt_tokens=1500, cost_usd=0.0021)
    kid = dataclasses.replace(
        run("kidaaaabbbbb", RunStatus.SUCCESS, seq=2, started_at=NOW - 20, ended_at=NOW - 6),
        parent_run_id=root.run_id,
        root_run_id=root.run_id,
        depth=2,
        label="part A",
    )
    grandkid = dataclasses.replace(
        run("grandaaabbbb", RunStatus.RUNNING, seq=3, started_at=NOW - 10),
        parent_run_id=kid.run_id,
        root_run_id=root.run_id,
        depth=3,
        label="detail",
        completion_tokens=40,
    )
    other = run("otheraaabbbb", RunStatus.QUEUED, seq=4, created_at=NOW - 1, label="solo")
    lines = render_list([other, grandkid, kid, root], now=NOW).splitlines()
    assert [line.split(" · ")[0] for line in lines[1:]] == [
        "#4 ⏳ queued",
        "#1 🏃 waiting for its subagents",
        "  └ #2 ✅ success",
        "    └ #3 🏃 running",
    ]
    assert "1.5k tok $0.0021" in lines[2] and "40 tok" in lines[4]
    family = render_family(kid, [root, kid, grandkid])
    assert family == [
        "• Parent: #1 🏃 lead",
        "• Children: #3 🏃 running",
        "• Tree: 3 runs (depth 2) · 1.5k tokens · est $0.0021",
    ]
    assert render_family(other, [other]) == []


def test_empty_list_is_friendly() -> None:
    assert render_list([], now=NOW) == EMPTY_LIST
    assert render_list([], now=NOW, scope="this channel") == EMPTY_LIST


def test_info_lists_every_field() -> None:
    record = run(
        "aaaa1111bbbb",
        RunStatus.STOPPED,
        seq=2,
        label="L",
        started_at=NOW - 100,
        ended_at=NOW - 40,
        prompt_tokens=2400,
        completion_tokens=700,
        cost_usd=0.0012,
        cleanup=Cleanup.KEEP,
        thinking="low",
        result="partial answer",
        notes="stopped by alice (console:alice) after 1m00s",
    )
    text = render_info(
        record, now=NOW, transcript_ref="fanbot:transcript:sid", archive_at=NOW + 3600
    )
    for needle in (
        "**Subagent #2** · ⏹️ stopped · L",
        "• Task: Find out everything about the thing",
        "• Run id: `aaaa1111bbbb`",
        "• Child session: `agent:main:subagent:aaaa1111bbbb`",
        "• Session id: `sid-aaaa1111bbbb`",
        "• Transcript: `fanbot:transcript:sid`",
        "• Type: researcher · Model: `fake-model` · thinking low",
        "• Created: 2023-11-14 22:08:20 UTC (5m00s ago)",
        "• Started: 2023-11-14 22:11:40 UTC (1m40s ago)",
        "• Ended: 2023-11-14 22:12:40 UTC (40s ago)",
        "• Runtime: 1m00s",
        "• Tokens: 3.1k (in 2.4k / out 700) · Cost: est $0.0012",
        "• Cleanup: keep · Archive: due 2023-11-14 23:13:20 UTC (in 1h00m)",
        "• Outcome: stopped",
        "• Result: partial answer",
        "• Notes: stopped by alice",
    ):
        assert needle in text, needle


def test_info_list_and_tree_show_cached_reasoning_and_estimated_tokens() -> None:
    spent = run(
        "a", RunStatus.SUCCESS, prompt_tokens=12_000, completion_tokens=400, cached_tokens=8_000,
        reasoning_tokens=1_200, usage_estimated=True, cost_usd=0.0123,
    )  # fmt: skip
    text = render_info(spent, now=NOW, transcript_ref="t", archive_at=None)
    assert "• Tokens: ~12.4k (in 12.0k, 8.0k cached / out 400, 1.2k reasoning)" in text
    assert spend(spent) == "~12.4k tok $0.0123"
    kid = run("b", RunStatus.SUCCESS, parent_run_id="a", prompt_tokens=100, depth=2)
    assert render_family(spent, [spent, kid])[-1].endswith("· ~12.5k tokens · est $0.0123")
    reported = dataclasses.replace(spent, usage_estimated=False, cached_tokens=0)
    shown = render_info(reported, now=NOW, transcript_ref="t", archive_at=None)
    assert "• Tokens: 12.4k (in 12.0k / out 400, 1.2k reasoning)" in shown


def test_info_of_a_running_and_an_archived_run() -> None:
    active = render_info(
        run("a", RunStatus.RUNNING, started_at=NOW - 10, result="so far"),
        now=NOW, transcript_ref="t", archive_at=None,
    )  # fmt: skip
    assert "• Runtime: 10s so far" in active and "• Progress: so far" in active
    assert "Archive: after it ends" in active and "Outcome" not in active
    archived = render_info(
        run("b", RunStatus.ERROR, ended_at=NOW - 5, archived_at=NOW - 1, notes="boom"),
        now=NOW, transcript_ref="t.deleted.1", archive_at=None,
    )  # fmt: skip
    assert "Archive: archived" in archived and "• Error: boom" in archived
    assert "• Started: —" in archived and "Runtime: not started" in archived


def test_info_lists_each_attempt_of_a_run_whose_worker_was_lost() -> None:
    lost = (f"{NOW - 30}|worker process died (pid 41)", f"{NOW - 12}|its worker stopped responding")
    waiting = run("a", RunStatus.RUNNING, started_at=NOW - 60, attempt=3, attempt_ends=lost,
                  resuming=NOW - 11)  # fmt: skip
    text = render_info(waiting, now=NOW, transcript_ref="t", archive_at=None)
    assert "• Attempts: 3" in text
    assert "  1. ended 2023-11-14 22:12:50 UTC (30s ago): worker process died (pid 41)" in text
    assert "  2. ended 2023-11-14 22:13:08 UTC (12s ago): its worker stopped responding" in text
    assert "  3. waiting for a worker" in text
    once = render_info(run("b", RunStatus.RUNNING, started_at=NOW - 5), now=NOW,
                       transcript_ref="t", archive_at=None)  # fmt: skip
    assert "Attempts" not in once
    gave_up = run("c", RunStatus.UNKNOWN, attempt=3, attempt_ends=(*lost, f"{NOW - 2}|died again"),
                  notes="its worker died 3 times; not resumed again")  # fmt: skip
    text = render_info(gave_up, now=NOW, transcript_ref="t", archive_at=None)
    assert "• Attempts: 3" in text and "  3. ended" in text and "  4." not in text
    assert "• Error: its worker died 3 times; not resumed again" in text


TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a researcher."},
    {"role": "user", "content": "Find it"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": "calculate", "arguments": '{"expression": "2*3"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "6"},
    {
        "role": "assistant",
        "content": "Checking once more.",
        "tool_calls": [{"id": "c2", "function": {"name": "calculate", "arguments": '{"expression": "3*2"}'}}],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "6"},
    {"role": "assistant", "content": "It is `6`.\nDone."},
]  # fmt: skip
CONVERSATION = [0, 1, 4, 6]
"""Indexes of TRANSCRIPT the log shows without ``tools`` (message 4 without its call)."""


@pytest.mark.parametrize(
    ("limit", "tools", "length", "shown", "total"),
    [
        (20, False, None, CONVERSATION, 7),
        (2, False, None, [4, 6], 7),
        (20, True, None, list(range(7)), 7),
        (3, True, None, [4, 5, 6], 7),
        # Only the newest messages were read: the total is still the transcript's length.
        (3, True, 50, [4, 5, 6], 50),
        (20, False, 50, CONVERSATION, 50),
        (0, False, None, [], 7),
    ],
)
def test_log_selection(
    limit: int, tools: bool, length: int | None, shown: list[int], total: int
) -> None:
    view = select_log(TRANSCRIPT, limit=limit, tools=tools, length=length)
    expected = [visible(TRANSCRIPT[i], tools=tools) for i in shown]
    assert (list(view.messages), view.total) == (expected, total)


def test_log_hides_tool_messages_unless_asked_and_counts_the_whole_log() -> None:
    view = select_log(TRANSCRIPT, limit=2, tools=False)
    lines = render_log(run("a", RunStatus.SUCCESS), view=view, tools=False).splitlines()
    assert lines[0].endswith("— last 2 of 7 messages (tool calls hidden; add `tools` to show them)")
    assert lines[1:] == [
        "• **assistant**: Checking once more.",
        "• **assistant**: It is '6'. Done.",
    ]


def test_log_tools_adds_calls_and_results() -> None:
    view = select_log(TRANSCRIPT, limit=20, tools=True)
    text = render_log(run("a", RunStatus.SUCCESS), view=view, tools=True)
    assert text.splitlines()[1:] == [
        "• **system**: You are a researcher.",
        "• **user**: Find it",
        '• **assistant**: 🔧 calculate(expression="2*3")',
        "• **tool**: 6",
        '• **assistant**: Checking once more. 🔧 calculate(expression="3*2")',
        "• **tool**: 6",
        "• **assistant**: It is '6'. Done.",
    ]
    assert "— last 7 of 7 messages (with tool calls)" in text


def test_log_counts_the_whole_transcript_even_when_it_read_only_the_newest() -> None:
    view = select_log(TRANSCRIPT, limit=1, tools=False, length=5_000)
    text = render_log(run("a", RunStatus.SUCCESS), view=view, tools=False)
    assert "— last 1 of 5,000 messages" in text


def test_log_of_an_empty_transcript() -> None:
    view = select_log([], limit=20, tools=False)
    text = render_log(run("a", RunStatus.QUEUED, seq=3), view=view, tools=False)
    assert text.endswith("(nothing yet)") and "subagent #3" in text


def test_log_lines_are_bounded() -> None:
    line = log_line({"role": "assistant", "content": "word " * 1000})
    assert len(line) < 450 and line.endswith("…")


def test_continuation_resumes_the_transcript_without_dangling_tool_calls() -> None:
    prior = [{**m, "ts": 1.0} for m in TRANSCRIPT]
    dangling = {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "function": {}}]}
    messages = continuation([*prior, dangling], "and now in French")
    assert messages[:-1] == TRANSCRIPT  # ts dropped, the unanswered call dropped
    assert messages[-1] == {"role": "user", "content": "and now in French"}


def test_continuation_trims_long_sessions_but_keeps_the_system_prompt() -> None:
    prior: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    prior += [{"role": "user", "content": f"m{i}"} for i in range(500)]
    messages = continuation(prior, "next")
    assert messages[0]["content"] == "sys" and len(messages) == 201
    assert re.fullmatch(r"m\d+", messages[1]["content"]) and messages[-2]["content"] == "m499"
