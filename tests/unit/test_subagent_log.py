"""``/subagents log`` and ``sessions_history`` read one log the same way (real Redis)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.agent.tools import execute_tool
from bot.commands import default_router
from bot.commands.answers import render_log
from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest
from bot.config import Settings
from bot.deps import Deps
from bot.runs.logview import read_log
from bot.sessions import requester_session_key
from bot.types import Inbound, RunRecord, Sender, ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = requester_session_key(agent_id="main", thread=THREAD)


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def spawn_with_transcript(deps: Deps, rounds: int) -> RunRecord:
    """A run whose transcript is system, user, ``rounds`` x (tool call, tool result),
    and a final answer: ``3 + 2 * rounds`` messages, 3 of them conversation."""
    ctx = ToolContext(
        deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1", agent_id="main"
    )
    record = deps.runs.get(str(spawn(ctx, SpawnArgs(task="count"))["runId"]))
    assert record is not None
    write = deps.transcripts.append
    write(record.session_id, {"role": "system", "content": "You count."})
    write(record.session_id, {"role": "user", "content": "count"})
    for i in range(rounds):
        call = {"id": f"c{i}", "function": {"name": "calculate", "arguments": f'{{"n": {i}}}'}}
        write(record.session_id, {"role": "assistant", "content": None, "tool_calls": [call]})
        write(record.session_id, {"role": "tool", "tool_call_id": f"c{i}", "content": str(i)})
    write(record.session_id, {"role": "assistant", "content": "Counted."})
    return record


def command(deps: Deps, text: str) -> str:
    parsed = parse_command(text)
    assert parsed is not None
    inbound = Inbound(
        thread=THREAD, sender=Sender(user_id="U1", display_name="U1"), text=text, message_id="m"
    )
    request = CommandRequest(command=parsed, inbound=inbound, session_key=SESSION, deps=deps)
    return default_router().dispatch(request)


def history(deps: Deps, **args: Any) -> dict[str, Any]:
    ctx = ToolContext(
        deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1", agent_id="main"
    )
    tools = {t.name: t for t in SESSION_TOOLS_LIST}
    answer = execute_tool(
        tools, name="sessions_history", arguments=json.dumps(args), ctx=ctx, max_chars=99_999
    )
    result: dict[str, Any] = json.loads(answer)
    return result


def test_log_shows_the_conversation_and_tools_adds_the_tool_messages(deps: Deps) -> None:
    spawn_with_transcript(deps, rounds=30)  # 63 messages, 3 of them conversation

    plain = command(deps, "/subagents log 1").splitlines()
    assert plain[0].endswith(
        "— last 3 of 63 messages (tool calls hidden; add `tools` to show them)"
    )
    assert plain[1:] == [
        "• **system**: You count.",
        "• **user**: count",
        "• **assistant**: Counted.",
    ]

    tools = command(deps, "/subagents log 1 5 tools").splitlines()
    assert tools[0].endswith("— last 5 of 63 messages (with tool calls)")
    assert tools[1:] == [
        "• **assistant**: 🔧 calculate(n=28)",
        "• **tool**: 28",
        "• **assistant**: 🔧 calculate(n=29)",
        "• **tool**: 29",
        "• **assistant**: Counted.",
    ]


def test_log_counts_the_whole_transcript_not_what_it_shows(deps: Deps) -> None:
    spawn_with_transcript(deps, rounds=2)  # 7 messages
    assert "— last 2 of 7 messages" in command(deps, "/subagents log 1 2")
    assert "— last 7 of 7 messages" in command(deps, "/subagents log 1 tools")
    assert "— last 2 of 7 messages" in command(deps, "/subagents log 1 2 tools")


def test_a_log_longer_than_the_scan_still_counts_the_whole_transcript(deps: Deps) -> None:
    record = spawn_with_transcript(deps, rounds=10)  # 23 messages; the newest 10 hold 1 answer
    key = deps.transcripts.current_key(record.session_id)
    plain = read_log(deps.transcripts, key, limit=20, tools=False, scan=10)
    assert (len(plain.messages), plain.total) == (1, 23)
    assert "— last 1 of 23 messages" in render_log(record, view=plain, tools=False)
    full = read_log(deps.transcripts, key, limit=20, tools=True, scan=10)
    assert (len(full.messages), full.total) == (20, 23)


def test_sessions_history_tools_flag_adds_tool_messages_like_the_command(deps: Deps) -> None:
    spawn_with_transcript(deps, rounds=2)
    plain = history(deps, id="1")
    assert [m["role"] for m in plain["messages"]] == ["system", "user", "assistant"]
    assert plain["total"] == 7  # the whole transcript, as the command counts
    full = history(deps, id="1", tools=True, limit=4)
    assert [m["role"] for m in full["messages"]] == ["tool", "assistant", "tool", "assistant"]
    assert full["messages"][1]["tool_calls"][0]["function"]["name"] == "calculate"
    assert full["total"] == 7


def command_by(deps: Deps, text: str, user: str) -> str:
    parsed = parse_command(text)
    assert parsed is not None
    inbound = Inbound(
        thread=THREAD, sender=Sender(user_id=user, display_name=user), text=text, message_id="m"
    )
    request = CommandRequest(command=parsed, inbound=inbound, session_key=SESSION, deps=deps)
    return default_router().dispatch(request)


@pytest.fixture
def admin_deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        admins=["slack:UADMIN"],
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def test_tool_results_are_shown_only_to_the_requester_and_admins(admin_deps: Deps) -> None:
    """Before: anyone in the thread read the tool results (files others uploaded)."""
    deps = admin_deps
    spawn_with_transcript(deps, rounds=2)  # requested by slack:U1

    refused = command_by(deps, "/subagents log 1 tools", "U2")
    assert refused == (
        "Only an admin or the person who started subagent #1 can see its tool calls; "
        "`/subagents log 1` shows its conversation."
    )
    assert "🔧" not in refused
    assert "• **assistant**: Counted." in command_by(deps, "/subagents log 1", "U2")  # open
    assert "🔧 calculate(n=1)" in command_by(deps, "/subagents log 1 tools", "U1")
    assert "🔧 calculate(n=1)" in command_by(deps, "/subagents log 1 tools", "UADMIN")


@pytest.mark.parametrize("target", ["9", "#0", "zzzz", "last"])
def test_log_tools_of_an_unknown_run_names_no_run(deps: Deps, target: str) -> None:
    answer = command_by(deps, f"/subagents log {target} tools", "U2")
    assert "🔧" not in answer and "Only an admin" not in answer


def test_the_models_sessions_history_shows_tool_results_only_to_the_requester_and_admins(
    admin_deps: Deps,
) -> None:
    """Before: a turn asked by anyone in the thread had the model read another person's
    run's tool results with ``sessions_history(tools=true)``, and could post them."""
    deps = admin_deps
    spawn_with_transcript(deps, rounds=2)  # requested by slack:U1
    tools = {t.name: t for t in SESSION_TOOLS_LIST}

    def ask(requester: str, **args: Any) -> str:
        ctx = ToolContext(
            deps=deps, session_key=SESSION, thread=THREAD, requester=requester, agent_id="main"
        )
        return execute_tool(
            tools, name="sessions_history", arguments=json.dumps(args), ctx=ctx, max_chars=99_999
        )

    refused = ask("slack:U2", id="1", tools=True)
    assert refused.startswith("error: Only an admin or the person who started subagent #1")
    assert refused.endswith("(ask again without tools)") and "calculate" not in refused
    plain = json.loads(ask("slack:U2", id="1"))  # the conversation stays readable
    assert [m["role"] for m in plain["messages"]] == ["system", "user", "assistant"]
    for requester in ("slack:U1", "slack:UADMIN"):
        full = json.loads(ask(requester, id="1", tools=True))
        assert full["total"] == 7
