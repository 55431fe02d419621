"""Runs that fail, time out or lose their worker still end once and announce once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bot.keys import Keys
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
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
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from bot.types import RunRecord, RunStatus
from tests.e2e.conftest import stack_values


def spawner(
    tasks: list[str], subagent: Callable[[ChatRequest], Reply], **spawn: object
) -> ScriptedModel:
    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        return ToolCalls([Call("sessions_spawn", {"task": t, **spawn}) for t in tasks])

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


def runs(redis_url: str) -> RunsRegistry:
    return RunsRegistry(redis=redis.Redis.from_url(redis_url), keys=Keys())


def only_run(registry: RunsRegistry) -> RunRecord | None:
    records = registry.all()
    return records[0] if records else None


async def test_model_500_three_times_ends_error_with_the_error_in_notes(redis_url: str) -> None:
    model = spawner(["fail please"], lambda r: Fail(500, message="upstream exploded"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
        sub_requests = [r for r in fake.requests if is_subagent(r.chat)]
    text = channel.announces[0].text
    assert "❌ Subagent #1" in text and "failed" in text
    assert "Status: error" in text
    assert "Notes: model call failed after 0 step(s): HTTP 500" in text
    assert "upstream exploded" in text
    assert len(sub_requests) == 3  # the first try and two retries


async def test_run_timeout_ends_timeout_with_partial_note(redis_url: str) -> None:
    model = spawner(["be slow"], lambda r: Hang(30), runTimeoutSeconds=2)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
    text = channel.announces[0].text
    assert "Status: timeout" in text
    assert "run timeout of 2s reached" in text


async def test_a_tool_inside_the_loop_does_not_swallow_the_job_timeout(redis_url: str) -> None:
    def subagent(req: ChatRequest) -> Reply:
        if not req.tool_results:
            return ToolCalls([Call("boom_tool", {})])
        if len(req.tool_results) == 1:
            assert (
                "error: boom_tool failed: ValueError: the tool broke" in req.tool_results[0].content
            )
            return ToolCalls([Call("slow_tool", {})], content="partial: tried boom")
        return Text("unreachable")

    model = spawner(["use the tools"], subagent, runTimeoutSeconds=2)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(
            redis_url,
            fake.base_url,
            tools={"extra": ["tests.e2e.plugin_tools:slow", "tests.e2e.plugin_tools:boom"]},
            subagents={"job_grace_seconds": 2},
        )
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
    text = channel.announces[0].text
    assert "Status: timeout" in text
    if stack.pool.threads:  # the worker ends it a second past its own deadline
        assert "run timeout of 2s reached (it did not end there)" in text, text
    else:  # RQ's hard limit (SIGALRM) interrupts the tool
        assert "(hard limit)" in text
    assert "Result: partial: tried boom" in text
    record = only_run(runs(redis_url))
    assert record is not None and record.status is RunStatus.TIMEOUT


async def _run_until_running(
    stack: Stack, channel: MemoryChannel, redis_url: str, fake: FakeOpenAI | None = None
) -> RunRecord:
    """Until the run executes (and, with ``fake``, its first model call is in flight: a
    kill before it would leave the next attempt to make the first call)."""
    await channel.say("go")
    registry = runs(redis_url)

    def running() -> bool:
        record = only_run(registry)
        return record is not None and record.status is RunStatus.RUNNING

    await stack.wait_for(running, timeout=30)
    await stack.wait_for(lambda: bool(stack.pool.run_pids()), timeout=10)
    if fake is not None:
        await stack.wait_for(lambda: any(is_subagent(r.chat) for r in fake.requests), timeout=10)
    record = only_run(registry)
    assert record is not None
    return record


def hang_once(then: str) -> Callable[[ChatRequest], Reply]:
    """A subagent whose first model call hangs (its worker is killed meanwhile) and whose
    next attempt answers ``then``."""
    asked: list[ChatRequest] = []

    def subagent(request: ChatRequest) -> Reply:
        asked.append(request)
        return Hang(60) if len(asked) == 1 else Text(then)

    return subagent


async def test_sigkilled_worker_host_is_resumed_via_the_reaper(
    redis_url: str, tmp_path: Path
) -> None:
    model = spawner(["hang around"], hang_once("done elsewhere"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await _run_until_running(stack, channel, redis_url, fake)
            # Another host's launcher runs the reaper; this host goes whole (its launcher
            # would otherwise resume the run at once: tests/faults/test_worker_faults.py).
            other = WorkerPool(env=hermetic_env(values), count=1, log_path=tmp_path / "b.log")
            other.start()
            try:
                killed_at = time.monotonic()
                stack.pool.kill_all()
                await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
                detected = time.monotonic() - killed_at
            finally:
                other.stop()
    text = channel.announces[0].text
    assert "Status: success" in text and "done elsewhere" in text, text
    record = only_run(runs(redis_url))
    assert record is not None and record.attempt == 2
    assert "its worker stopped responding (no heartbeat for 3s)" in record.attempt_ends[0]
    print(f"SIGKILL -> resumed elsewhere and announced in {detected:.1f}s")


async def test_sigkilled_work_horse_is_resumed_via_the_horse_handler(redis_url: str) -> None:
    model = spawner(["hang around"], hang_once("done after all"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents={"stale_after_seconds": 60})
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await _run_until_running(stack, channel, redis_url, fake)
            for pid in stack.pool.run_pids():
                os.kill(pid, signal.SIGKILL)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=20)
    text = channel.announces[0].text
    assert "Status: success" in text and "done after all" in text, text
    record = only_run(runs(redis_url))
    assert record is not None and record.attempt == 2
    assert "worker process died" in record.attempt_ends[0]
