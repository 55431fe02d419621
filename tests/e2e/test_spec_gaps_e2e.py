"""The last gaps against the subagent specs, end to end on forked workers: ``allowAgents``,
the announce's stats line, ``/subagents log`` counting the whole transcript, a quiet
(``ANNOUNCE_SKIP``) run at fan-in, and ``runTimeoutSeconds: 0`` without a maximum."""

from __future__ import annotations

import re
from typing import Any

import redis

from bot.deps import Deps
from bot.sessions import requester_session_key
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Hang,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import FAN_IN_MARK, RunRecord
from tests.e2e.conftest import stack_values

STATS = re.compile(
    r"· session key (agent:(\w+):subagent:\S+) · session id ([0-9a-f]{32}) · run id "
    r"([0-9a-f]{8}) · transcript (\S+)$"
)


def spawner(spawns: list[dict[str, Any]], subagent: Any) -> ScriptedModel:
    """The main agent spawns ``spawns`` at the first message, then says it is on it (a
    fan-in continuation gets the statuses it was given back)."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        if req.last_user_message.startswith(FAN_IN_MARK):
            return Text("SYNTHESIS\n" + req.last_user_message)
        return ToolCalls([Call("sessions_spawn", s) for s in spawns])

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


def deps_of(stack: Stack) -> Deps:
    return Deps.build(stack.settings, client=redis.Redis.from_url(stack.settings.redis_url))


def runs_of(deps: Deps, channel: MemoryChannel) -> list[RunRecord]:
    key = requester_session_key(agent_id="main", thread=channel.thread())
    return sorted(deps.runs.session_runs(key), key=lambda r: r.seq)


def tool_texts(fake: FakeOpenAI) -> str:
    return "\n".join(
        str(m.get("content")) for r in fake.requests for m in r.chat.messages if m["role"] == "tool"
    )


async def test_allow_agents_stats_line_and_log_count(redis_url: str) -> None:
    def subagent(req: ChatRequest) -> Reply:
        if req.last_role == "user":  # one tool round: the log hides it, but counts it
            return ToolCalls([Call("current_time", {})])
        return Text("ops done")

    spawns = [
        {"task": "check ops", "label": "O", "agentId": "ops"},
        {"task": "write docs", "label": "D", "agentId": "docs"},
    ]
    agents = {"main": {"allow_agents": ["ops"]}, "ops": {}, "docs": {}}
    async with FakeOpenAI(spawner(spawns, subagent), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, agents=agents)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
            await channel.say("/subagents log 1")
            await stack.wait_for(
                lambda: any("**Log of" in r.text for r in channel.replies), timeout=20
            )
            deps = deps_of(stack)
            try:
                [run] = runs_of(deps, channel)
                transcript = deps.transcripts.current_key(run.session_id)
                length = deps.transcripts.length_key(transcript)
            finally:
                deps.close()
    # allowAgents: the allowed agent runs the task, the other one is a tool error
    assert "agentId 'docs' is not allowed for agent 'main'; allowed: main, ops" in tool_texts(fake)
    assert run.agent_id == "ops" and run.label == "O"
    # the stats line: session key, session id, run id, transcript key
    [announce] = channel.announces
    stats = STATS.search(announce.text)
    assert stats is not None, announce.text
    assert stats.group(1) == run.child_session_key and stats.group(2) == "ops"
    assert stats.group(3) == run.session_id and run.run_id.startswith(stats.group(4))
    assert stats.group(5) == transcript
    # /subagents log: "last K of M" counts every message of the transcript
    log = next(r.text for r in channel.replies if "**Log of" in r.text)
    assert length == 5  # system, task, tool call, tool result, answer
    assert "— last 3 of 5 messages (tool calls hidden" in log


async def test_a_quiet_run_at_fan_in_never_leaks_the_sentinel(redis_url: str) -> None:
    def subagent(req: ChatRequest) -> Reply:
        quiet = req.last_user_message == "nothing to say"
        return Text("ANNOUNCE_SKIP" if quiet else "found it", delay=0.3)

    spawns = [
        {"task": "nothing to say", "label": "Q"},
        {"task": "find it", "label": "F"},
    ]
    async with FakeOpenAI(spawner(spawns, subagent), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents={"announce": "both"})
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(
                lambda: any(r.text.startswith("SYNTHESIS") for r in channel.replies), timeout=40
            )
            deps = deps_of(stack)
            try:
                runs = runs_of(deps, channel)
                key = requester_session_key(agent_id="main", thread=channel.thread())
                history = deps.history.load(key)
            finally:
                deps.close()
    assert [r.result for r in runs] == ["ANNOUNCE_SKIP", "found it"]
    assert len(channel.announces) == 1 and '"F"' in channel.announces[0].text
    prompt = next(r for r in fake.requests if FAN_IN_MARK in r.chat.last_user_message)
    text = prompt.chat.last_user_message
    assert '- Subagent #1 "Q" (general-purpose): finished without a result to show' in text
    assert '- Subagent #2 "F" (general-purpose): success' in text
    assert "ANNOUNCE_SKIP" not in text
    assert any(FAN_IN_MARK in str(m.get("content")) for m in history)  # the prompt stays
    assert "ANNOUNCE_SKIP" not in str(history)


async def test_run_timeout_zero_without_a_maximum_has_no_deadline_and_still_stops(
    redis_url: str,
) -> None:
    def subagent(req: ChatRequest) -> Reply:
        if req.last_user_message == "forever":
            return Hang(50, then=Text("too late"))
        return Hang(6, then=Text("slow but done"))

    spawns = [
        {"task": "slow", "label": "N", "runTimeoutSeconds": 0},
        {"task": "slow", "label": "T"},  # the default timeout: 2 s here
        {"task": "forever", "label": "S", "runTimeoutSeconds": 0},
    ]
    sub = {"run_timeout_seconds": 2, "job_grace_seconds": 1, "max_run_timeout_seconds": 0}
    async with FakeOpenAI(spawner(spawns, subagent), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=sub)
        # three workers: in the fork pool (a run per process) the three runs go at once too
        async with Stack(values=values, adapters=[channel], workers=3) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
            await channel.say("/subagents info 3")
            await stack.wait_for(
                lambda: any(r.text.startswith("**Subagent #3") for r in channel.replies),
                timeout=20,
            )
            await channel.say("/subagents stop 3")
            await stack.wait_for(lambda: len(channel.announces) == 3, timeout=30)
            deps = deps_of(stack)
            try:
                runs = runs_of(deps, channel)
            finally:
                deps.close()
    by_label = {a.text.split('"')[1]: a.text for a in channel.announces}
    assert "Status: success" in by_label["N"] and "Result: slow but done" in by_label["N"]
    assert "Status: timeout" in by_label["T"] and "run timeout of 2s reached" in by_label["T"]
    assert "Status: stopped" in by_label["S"]
    no_deadline, timed, stopped = runs
    assert (no_deadline.timeout_s, timed.timeout_s, stopped.timeout_s) == (0, 2, 0)
    assert no_deadline.started_at is not None and no_deadline.ended_at is not None
    assert no_deadline.ended_at - no_deadline.started_at > 2 + 1  # past the default + grace
    assert "timeout" not in by_label["N"].partition("Notes:")[2]
    info = next(r.text for r in channel.replies if r.text.startswith("**Subagent #3"))
    assert "running" in info and not re.search("timeout|deadline", info, re.I)
