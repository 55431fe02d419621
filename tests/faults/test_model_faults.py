"""Model endpoint faults: 429/5xx bursts and hanging responses, with forked workers.

Every run must end in exactly one terminal status with one announce: a burst shorter than
the SDK's retry budget ends ``success``; a failure that outlasts it ends ``error`` with the
HTTP status in the notes after exactly ``max_retries + 1`` requests; a hanging endpoint
ends ``timeout`` close to the run timeout. Nothing stays queued, running or holding an RQ
concurrency slot afterwards. (tests/e2e/test_failures.py covers a plain 500x3 and a
first-step hang; these extend it.)
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from bot.keys import Keys
from bot.store.jobs import Jobs
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
from bot.types import Outbound, RunRecord, RunStatus
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

MAX_RETRIES = 3
TIMEOUT_GRACE = 2.5  # seconds a hanging run may overrun its run timeout (poll + finalize)


@dataclass(frozen=True)
class Task:
    """One subagent: its task text, what the model answers it, extra spawn parameters."""

    text: str
    reply: Reply | list[Reply] | Callable[[ChatRequest], Reply]
    spawn: Mapping[str, Any] | None = None


def script(tasks: list[Task]) -> ScriptedModel:
    """The main agent spawns every task in one response; each subagent gets its reply."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("on it")
        return ToolCalls(
            [Call("sessions_spawn", {"task": t.text, **(t.spawn or {})}) for t in tasks]
        )

    model = ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main)
    for task in tasks:
        model.on(subagent_of(task.text), task.reply)
    return model


def subagent_of(task: str) -> Callable[[ChatRequest], bool]:
    return lambda r: is_subagent(r) and r.last_user_message == task


@dataclass
class Env:
    fake: FakeOpenAI
    channel: MemoryChannel
    stack: Stack
    redis_url: str

    def requests_for(self, task: str) -> list[RecordedRequest]:
        return [
            r
            for r in self.fake.requests
            if is_subagent(r.chat) and r.chat.last_user_message == task
        ]

    def records(self) -> dict[str, RunRecord]:
        """Every run by task text."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            return {r.task: r for r in RunsRegistry(redis=client, keys=Keys()).all()}
        finally:
            client.close()

    def announce_for(self, record: RunRecord) -> Outbound:
        key = f"announce:{record.run_id}"
        (found,) = [a for a in self.channel.announces if a.idempotency_key == key]
        return found

    async def settle(self, count: int, *, timeout: float = 40) -> None:
        """Wait for ``count`` announces and an empty outbox (so duplicates would show)."""
        await self.stack.wait_for(lambda: len(self.channel.announces) >= count, timeout=timeout)
        gateway = self.stack.gateway
        assert gateway is not None
        await self.stack.wait_for(gateway.egress.drained, timeout=10)


@asynccontextmanager
async def running(redis_url: str, tasks: list[Task], **extra: Any) -> AsyncIterator[Env]:
    async with FakeOpenAI(script(tasks), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        openai = {"max_retries": MAX_RETRIES, **extra.pop("openai", {})}
        values = stack_values(redis_url, fake.base_url, openai=openai, **extra)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            env = Env(fake=fake, channel=channel, stack=stack, redis_url=redis_url)
            await channel.say("go")
            yield env


def gaps(requests: list[RecordedRequest]) -> list[float]:
    """Seconds between the end of each request and the start of the next (client waits)."""
    return [b.started_at - (a.finished_at or a.started_at) for a, b in itertools.pairwise(requests)]


def assert_nothing_left(env: Env) -> None:
    client = redis.Redis.from_url(env.redis_url)
    try:
        assert client.scard(Keys().active_runs) == 0
        assert client.zcard(Jobs(redis=client).subagent_slot_key()) == 0
    finally:
        client.close()
    assert all(r.status.terminal for r in env.records().values())


async def test_429_and_5xx_bursts_within_the_retry_budget_end_success(redis_url: str) -> None:
    tasks = [
        Task("rate limited burst", [Fail(429, retry_after=0), Fail(429, retry_after=1),
                                    Fail(429, retry_after=0), Text("made it past the 429s")]),
        Task("flaky upstream", [Fail(500, retry_after=0.1), Fail(503, retry_after=0.1),
                                Text("made it past the 5xx")]),
    ]  # fmt: skip
    async with running(redis_url, tasks) as env:
        await env.settle(2)
        records = env.records()
        for task, result in [
            (tasks[0], "made it past the 429s"),
            (tasks[1], "made it past the 5xx"),
        ]:
            record = records[task.text]
            assert record.status is RunStatus.SUCCESS, record.notes
            text = env.announce_for(record).text
            assert "Status: success" in text and f"Result: {result}" in text
            assert "Notes:" not in text
        rate = env.requests_for(tasks[0].text)
        flaky = env.requests_for(tasks[1].text)
        assert [r.retry_count for r in rate] == [0, 1, 2, 3]
        assert [r.status for r in rate] == [429, 429, 429, 200]
        assert [r.retry_count for r in flaky] == [0, 1, 2]
        assert [r.status for r in flaky] == [500, 503, 200]
        waited = gaps(rate)
        assert waited[1] >= 1.0  # "retry-after: 1" honoured
        print(f"429 burst: client waits between attempts {[round(w, 2) for w in waited]}s")
        assert_nothing_left(env)


async def test_429_and_502_forever_end_error_after_exactly_max_retries_plus_one(
    redis_url: str,
) -> None:
    tasks = [
        Task("always rate limited", Fail(429, retry_after=0.2, message="slow down please")),
        Task("always bad gateway", Fail(502, retry_after=0.1, message="gateway on fire")),
    ]
    async with running(redis_url, tasks) as env:
        await env.settle(2)
        records = env.records()
        for task, status, detail in [
            (tasks[0], 429, "slow down please"),
            (tasks[1], 502, "gateway on fire"),
        ]:
            record = records[task.text]
            assert record.status is RunStatus.ERROR
            text = env.announce_for(record).text
            assert "❌ Subagent" in text and "failed" in text and "Status: error" in text
            assert "Notes: model call failed after 0 step(s): " in text
            assert f"HTTP {status}" in text
            assert detail in text
            sent = env.requests_for(task.text)
            assert len(sent) == MAX_RETRIES + 1
            assert [r.retry_count for r in sent] == list(range(MAX_RETRIES + 1))
        assert min(gaps(env.requests_for(tasks[0].text))) >= 0.2  # retry-after honoured
        assert_nothing_left(env)


async def test_hanging_model_ends_timeout_near_the_run_timeout_keeping_partial_output(
    redis_url: str,
) -> None:
    def hangs_at_step_two(req: ChatRequest) -> Reply:
        if not req.tool_results:
            return ToolCalls([Call("current_time", {})], content="partial: looked at the clock")
        return Hang(60)

    tasks = [
        Task("hang on step two", hangs_at_step_two, {"runTimeoutSeconds": 3}),
        Task("hang on step one", Hang(60), {"runTimeoutSeconds": 2}),
    ]
    async with running(redis_url, tasks) as env:
        await env.settle(2)
        records = env.records()
        for task, limit in [(tasks[0], 3), (tasks[1], 2)]:
            record = records[task.text]
            assert record.status is RunStatus.TIMEOUT, record.notes
            assert record.started_at is not None and record.ended_at is not None
            took = record.ended_at - record.started_at
            assert limit <= took <= limit + TIMEOUT_GRACE, took
            text = env.announce_for(record).text
            assert "⏱️ Subagent" in text and "timed out" in text and "Status: timeout" in text
            assert f"run timeout of {limit}s reached" in text
            print(f"{task.text}: timeout after {took:.2f}s (limit {limit}s)")
        step_two = env.announce_for(records[tasks[0].text]).text
        assert "Result: partial: looked at the clock" in step_two
        assert "after 1 step(s)" in step_two
        # Each hanging request was abandoned by the client (not answered by the fake).
        hung = [
            r
            for t in tasks
            for r in env.requests_for(t.text)
            if r.reply and isinstance(r.reply, Hang)
        ]
        assert len(hung) == 2 and all(r.outcome == "disconnected" for r in hung)
        assert_nothing_left(env)


async def test_six_mixed_faults_with_two_slots_all_end_once_and_free_their_slots(
    redis_url: str,
) -> None:
    tasks = [
        Task("mix ok one", Text("one is fine", delay=0.3)),
        Task(
            "mix burst", [Fail(429, retry_after=0.2), Fail(500, retry_after=0.1), Text("burst ok")]
        ),
        Task("mix rate forever", Fail(429, retry_after=0.1)),
        Task("mix broken forever", Fail(503, retry_after=0.1)),
        Task("mix hang", Hang(60), {"runTimeoutSeconds": 2}),
        Task("mix ok two", Text("two is fine")),
    ]
    expected = {
        "mix ok one": RunStatus.SUCCESS,
        "mix burst": RunStatus.SUCCESS,
        "mix rate forever": RunStatus.ERROR,
        "mix broken forever": RunStatus.ERROR,
        "mix hang": RunStatus.TIMEOUT,
        "mix ok two": RunStatus.SUCCESS,
    }
    started = time.monotonic()
    async with running(redis_url, tasks, subagents={"max_concurrent": 2}) as env:
        await env.settle(6, timeout=50)
        took = time.monotonic() - started
        records = env.records()
        assert {task: r.status for task, r in records.items()} == expected
        keys = [a.idempotency_key for a in env.channel.announces]
        assert sorted(keys) == sorted(f"announce:{r.run_id}" for r in records.values())
        for record in records.values():
            status_line = re.search(r"Status: (\w+)", env.announce_for(record).text)
            assert status_line is not None and status_line[1] == record.status.value
        assert len(env.requests_for("mix rate forever")) == MAX_RETRIES + 1
        assert len(env.requests_for("mix broken forever")) == MAX_RETRIES + 1
        peak = env.fake.max_overlap(lambda r: is_subagent(r.chat))
        assert peak <= 2
        assert_nothing_left(env)
        print(f"6 mixed runs with 2 slots: all terminal in {took:.1f}s, peak concurrency {peak}")
