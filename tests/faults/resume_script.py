"""What the run-resume fault tests share: a three-step subagent (write a note, read it
back, answer), its requests and cards, and the check of one crash point (issue 26)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis

from bot.agent.resume import INTERRUPTED
from bot.keys import Keys
from bot.runs.recover import resumed_line
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Reply, Text, ToolCalls
from bot.testing.stack import Stack
from bot.text.units import tokens
from bot.types import RunRecord, RunStatus, Usage
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner

STEP = Usage(prompt_tokens=1000, completion_tokens=100)
"""What each of the subagent's model answers costs (so the stats can be summed)."""
NOTE = "/notes.md"
PACE = 0.7
"""Each answer takes this long, so the status card is edited while the run works (the
gateway edits it at most every 0.5 s here)."""


def registry(redis_url: str) -> RunsRegistry:
    return RunsRegistry(redis=redis.Redis.from_url(redis_url), keys=Keys())


def records(redis_url: str) -> list[RunRecord]:
    return registry(redis_url).all()


def tool_results(req: ChatRequest) -> list[str]:
    return [str(m.get("content")) for m in req.messages if m.get("role") == "tool"]


def three_steps(req: ChatRequest) -> Reply:
    """The subagent: writes a note, reads it back, answers with what it read."""
    done = tool_results(req)
    if not done:
        return ToolCalls(
            [Call("write_file", {"file_path": NOTE, "content": "hello"})], usage=STEP, delay=PACE
        )
    if len(done) == 1:
        return ToolCalls([Call("read_file", {"file_path": NOTE})], usage=STEP, delay=PACE)
    return Text(f"done; it read: {done[-1][:60]}", usage=STEP, delay=PACE)


def sub_requests(fake: FakeOpenAI) -> list[ChatRequest]:
    return [r.chat for r in fake.requests if not r.chat.has_tool("sessions_spawn")]


def by_step(fake: FakeOpenAI) -> dict[int, int]:
    """How many times the subagent's model was asked for each step (by results so far)."""
    counts: dict[int, int] = {}
    for req in sub_requests(fake):
        counts[len(tool_results(req))] = counts.get(len(tool_results(req)), 0) + 1
    return counts


def card_texts(channel: MemoryChannel) -> list[str]:
    return [m.text for m in channel.sent] + [e.text for e in channel.edits]


def workspace_file(stack: Stack, record: RunRecord) -> str | None:
    """The note as the run's workspace holds it (None: never written)."""
    assert stack.gateway is not None
    return stack.gateway.deps.workspace.get_text(record.session_key, NOTE)


async def check_killed_at(redis_url: str, tmp_path: Path, point: str) -> None:
    model = spawner(["take notes"], three_steps)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        failpoints = f"{point}=kill!{tmp_path / 'fired'}"
        async with Stack(
            values=values, adapters=[channel], workers=1, failpoints=failpoints
        ) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await asyncio.sleep(1.0)  # a second announce, if any, would be here by now
            log = stack.worker_log()
            [record] = records(redis_url)
            note = workspace_file(stack, record)
        counts = by_step(fake)
        requests = sub_requests(fake)
    assert (tmp_path / "fired").exists(), f"{point} never fired"
    text = channel.announces[0].text
    assert len(channel.announces) == 1
    assert record.status is RunStatus.SUCCESS, (record.status, record.notes, log[-3000:])
    assert "Status: success" in text, text
    assert record.attempt == 2 and len(record.attempt_ends) == 1, record
    assert any(resumed_line(1) in t for t in card_texts(channel)), card_texts(channel)
    final = [t for t in card_texts(channel) if t.startswith("✅ [")]
    assert final and "— success (2 tools, " in final[-1], final  # a repeated call counts once
    # The model call in flight is made again, once; every other step's request once.
    in_flight = {"run.in_model_call": 0}.get(point)
    for step, seen in counts.items():
        assert seen == (2 if step == in_flight else 1), (point, counts)
    assert sorted(counts) == [0, 1, 2], counts
    # Every completed answer's tokens count, whichever attempt made it.
    assert (record.prompt_tokens, record.completion_tokens) == (3 * 1000, 3 * 100), record
    assert f"tokens {tokens(3300)}" in text, text
    # write_file, not safe to repeat, never runs twice; read_file, safe, runs again.
    first_results = tool_results(requests[-1])
    if point.endswith(".write_file"):
        assert first_results[0] == INTERRUPTED, first_results
        written = point == "run.tool_done.write_file"
        assert note == ("hello" if written else None)
        if not written:
            assert "not found" in first_results[1] or "error" in first_results[1], first_results
    else:
        assert INTERRUPTED not in first_results
        assert note == "hello"
        assert "hello" in first_results[1], first_results
    assert "already exists" not in " ".join(first_results)
    assert "hello" in record.result or point.endswith(".write_file")
