"""A crashed worker loses no work: a run goes on from its last completed step (issue 26).

A failpoint (:mod:`bot.failpoints`) SIGKILLs the worker at one exact place of a run; the
``!<path>`` marker makes it fire once per machine, so the restarted worker's next attempt
goes past it. Each test asserts what the issue promises: the run ends ``success`` once,
announced once, its card says it was resumed, its stats count every attempt's tokens, a
call that is not safe to repeat is reported to the model as interrupted (never run twice),
a read-only one runs again, and a model call in flight is made again (once).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.agent.resume import INTERRUPTED
from bot.keys import Keys
from bot.runs.recover import exhausted_note, resumed_line
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from bot.text.units import tokens
from bot.types import RunRecord, RunStatus, Usage
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner

pytestmark = pytest.mark.e2e

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


CRASH_POINTS = [
    "run.before_first_step",
    "run.in_model_call",
    "run.tool_started.write_file",
    "run.tool_done.write_file",
    "run.tool_started.read_file",
    "run.tool_done.read_file",
    "run.between_steps",
    "run.finalize",
]


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_run_killed_at_each_point_resumes_and_succeeds_once(
    redis_url: str, tmp_path: Path, point: str
) -> None:
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
