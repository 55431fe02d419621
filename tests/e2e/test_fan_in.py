"""Fan-in end to end: after the last announce the main agent answers once, with every
run's status, across forked workers, two gateways, failures, stops and a killed worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import redis

from bot.gateway.runtime import Gateway
from bot.keys import Keys
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI, RecordedRequest
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Fail,
    Hang,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import FAN_IN_MARK, Outbound, RunStatus
from tests.e2e.conftest import stack_values


class TimedChannel(MemoryChannel):
    """Records when each message reached the platform (``time.monotonic()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: list[float] = []

    async def send(self, message: Outbound, **kw: Any) -> list[str]:
        before = len(self.sent)
        ids = await super().send(message, **kw)
        self.sent_at += [time.monotonic()] * (len(self.sent) - before)
        return ids


def is_continuation(req: ChatRequest) -> bool:
    return req.last_role == "user" and req.last_user_message.startswith(FAN_IN_MARK)


def fan_out(tasks: list[str], subagent: Any, *, spawn_again: bool = False) -> ScriptedModel:
    """Spawns one run per task; the continuation answers with the statuses it was given
    (or spawns once more, for chains)."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        if is_continuation(req):
            if spawn_again:
                return ToolCalls([Call("sessions_spawn", {"task": "next step"})])
            lines = [ln for ln in req.last_user_message.splitlines() if ln.startswith("- ")]
            return Text("SYNTHESIS\n" + "\n".join(lines))
        return ToolCalls([Call("sessions_spawn", {"task": t, "label": t}) for t in tasks])

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


def continuations(fake: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in fake.requests if is_continuation(r.chat)]


def synthesis(channel: MemoryChannel) -> list[Outbound]:
    return [r for r in channel.replies if r.text.startswith("SYNTHESIS")]


def fan_in_values(redis_url: str, base_url: str, **extra: Any) -> dict[str, Any]:
    sub = {"announce": "both", **extra.pop("subagents", {})}
    return stack_values(redis_url, base_url, subagents=sub, **extra)


async def test_three_way_fan_out_answers_once_after_the_last_announce_with_two_gateways(
    redis_url: str,
) -> None:
    def subagent(req: ChatRequest) -> Reply:
        task = req.last_user_message
        return Text(f"result of {task}", delay={"A": 0.2, "B": 0.8, "C": 1.6}[task])

    async with FakeOpenAI(fan_out(["A", "B", "C"], subagent), models=["fake-model"]) as fake:
        channel = TimedChannel()
        values = fan_in_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=4) as stack:
            second = Gateway(settings=stack.settings, adapters=[channel])
            await second.start()
            try:
                await channel.say("compare A, B and C")
                await stack.wait_for(lambda: len(synthesis(channel)) >= 1, timeout=40)
                await asyncio.sleep(2.0)  # a second continuation would arrive by now
            finally:
                await second.stop()
        [cont] = continuations(fake)
    [answer] = synthesis(channel)
    assert len(channel.announces) == 3
    last_announce = max(i for i, m in enumerate(channel.sent) if m in channel.announces)
    assert channel.sent.index(answer) > last_announce
    assert answer.text.splitlines()[1:] == [
        '- Subagent #1 "A" (general-purpose): success',
        '- Subagent #2 "B" (general-purpose): success',
        '- Subagent #3 "C" (general-purpose): success',
    ]
    # The results themselves reach the model as the history notes before the prompt.
    notes = [str(m.get("content")) for m in cont.chat.messages if m.get("role") == "user"]
    assert all(any(f"result of {t}" in n for n in notes) for t in "ABC")
    waited = cont.started_at - channel.sent_at[last_announce]
    print(f"last announce -> continuation's model request: {waited * 1000:.0f} ms")


async def test_one_continuation_after_success_error_stop_and_a_killed_worker(
    redis_url: str,
) -> None:
    def subagent(req: ChatRequest) -> Reply:
        task = req.last_user_message
        if task == "ok":
            return Text("fine")
        if task == "fail":
            return Fail(500, message="upstream exploded")
        return Hang(60)

    model = fan_out(["ok", "fail", "hang", "die"], subagent)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = fan_in_values(
            redis_url,
            fake.base_url,
            # A killed worker's run is not resumed here: it ends unknown.
            subagents={"stale_after_seconds": 60, "max_resumes": 0},
            workers={"concurrency": 1},  # threads pool: killing a process kills one run
        )
        registry = RunsRegistry(redis=redis.Redis.from_url(redis_url), keys=Keys())
        async with Stack(values=values, adapters=[channel], workers=4) as stack:
            await channel.say("four things")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)

            def hanging() -> list[int]:
                return [r.seq for r in registry.all() if r.status is RunStatus.RUNNING]

            await stack.wait_for(lambda: len(hanging()) == 2 and len(stack.pool.run_pids()) == 2)
            os.kill(stack.pool.run_pids()[0], signal.SIGKILL)
            await stack.wait_for(lambda: len(hanging()) == 1, timeout=20)
            await channel.say(f"/subagents stop {hanging()[0]}")
            await stack.wait_for(lambda: len(synthesis(channel)) == 1, timeout=40)
            await asyncio.sleep(1.5)
        assert len(continuations(fake)) == 1
    [answer] = synthesis(channel)
    statuses = sorted(line.rsplit(": ", 1)[1] for line in answer.text.splitlines()[1:])
    assert statuses == ["error", "stopped", "success", "unknown"]
    assert len(channel.announces) == 4


async def test_a_chain_runs_by_itself_and_stops_at_max_chain(redis_url: str) -> None:
    model = fan_out(["explore"], lambda r: Text("found it", delay=0.2), spawn_again=True)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = fan_in_values(redis_url, fake.base_url, subagents={"max_chain": 2})
        async with Stack(values=values, adapters=[channel], workers=3) as stack:
            await channel.say("explore, plan, implement")
            await stack.wait_for(lambda: len(channel.announces) == 3, timeout=40)
            await asyncio.sleep(2.0)
        assert len(continuations(fake)) == 2
        tool_answers = [
            json.loads(str(m.get("content")))
            for r in fake.requests
            for m in r.chat.messages[-1:]
            if m.get("role") == "tool"
        ]
    assert [a["join"] for a in tool_answers] == [True, True, False]
    assert "chain limit reached" in tool_answers[-1]["note"]


async def test_stop_cancels_the_pending_join(redis_url: str) -> None:
    model = fan_out(["x", "y"], lambda r: Hang(60))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = fan_in_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=3) as stack:
            await channel.say("two slow things")
            await stack.wait_for(lambda: fake.in_flight == 2, timeout=30)
            await channel.say("/stop")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=30)
            await asyncio.sleep(2.0)
        assert continuations(fake) == []
    stop_reply = next(r.text for r in channel.replies if "Stopped 2" in r.text)
    assert "The follow-up answer that was waiting for them is cancelled." in stop_reply
    assert all("Status: stopped" in a.text for a in channel.announces)


async def test_synthesis_mode_posts_one_line_cards_and_the_answer(redis_url: str) -> None:
    model = fan_out(["A", "B"], lambda r: Text(f"long result of {r.last_user_message}"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = fan_in_values(redis_url, fake.base_url, subagents={"announce": "synthesis"})
        async with Stack(values=values, adapters=[channel], workers=3) as stack:
            await channel.say("two things")
            await stack.wait_for(lambda: len(synthesis(channel)) == 1, timeout=40)
    for card in channel.announces:
        assert "\n" not in card.text and "long result" not in card.text
        assert card.text.startswith("✅ Subagent #") and " finished · " in card.text
