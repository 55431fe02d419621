"""The bounds of resuming a run whose worker died (issue 26): a poison pill, a type that
does not resume, a stopped run, a run parked for approval (the rest in
``test_run_resume_attempts.py``)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, Text, ToolCalls
from bot.testing.stack import Stack
from bot.types import RunStatus
from tests.e2e.approvals_script import model as approvals_model
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner
from tests.faults.resume_script import (
    NOTE,
    records,
    registry,
    sub_requests,
    three_steps,
    tool_results,
)

pytestmark = pytest.mark.e2e


def slow_steps(req: ChatRequest) -> Reply:
    """A subagent whose model answers slowly enough to be killed in the middle."""
    if not tool_results(req):
        return ToolCalls([Call("write_file", {"file_path": NOTE, "content": "hello"})])
    return Text("done", delay=0.5)


async def test_a_poison_pill_ends_unknown_after_its_worker_died_three_times(
    redis_url: str, tmp_path: Path
) -> None:
    """Every attempt dies at the same place: the third death ends it (max_resumes 2)."""
    model = spawner(["poison"], slow_steps)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(
            values=values, adapters=[channel], workers=1, failpoints="run.before_first_step=kill"
        ) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await asyncio.sleep(1.0)
            launcher = stack.pool.launcher
            assert launcher is not None and launcher.poll() is None  # still supervising
        asked = len(sub_requests(fake))
    [record] = records(redis_url)
    text = channel.announces[0].text
    assert len(channel.announces) == 1
    assert record.status is RunStatus.UNKNOWN and record.attempt == 3, record
    assert record.notes == "its worker died 3 times; not resumed again"
    assert "Status: unknown" in text and "its worker died 3 times; not resumed again" in text
    assert len(record.attempt_ends) == 3
    assert asked == 0  # it never got past the point


async def test_a_type_that_does_not_resume_ends_unknown(redis_url: str, tmp_path: Path) -> None:
    fragile = {"name": "fragile", "description": "Not resumable.", "resume": False}
    model = spawner(["fragile work"], three_steps, subagent_type="fragile")
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=[fragile])
        failpoints = f"run.tool_done.write_file=kill!{tmp_path / 'fired'}"
        async with Stack(
            values=values, adapters=[channel], workers=1, failpoints=failpoints
        ) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await asyncio.sleep(1.0)
    [record] = records(redis_url)
    assert record.subagent_type == "fragile"
    assert record.status is RunStatus.UNKNOWN and record.attempt == 1, record
    assert "worker process died" in record.notes
    assert len(channel.announces) == 1 and "Status: unknown" in channel.announces[0].text


async def test_a_run_whose_stop_was_asked_is_not_resumed_when_its_worker_dies(
    redis_url: str,
) -> None:
    model = spawner(["stop me"], lambda r: Hang(60))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            runs = registry(redis_url)
            await stack.wait_for(
                lambda: any(r.status is RunStatus.RUNNING for r in runs.all()), timeout=30
            )
            await stack.wait_for(lambda: fake.in_flight >= 1, timeout=10)
            [pid] = stack.pool.run_pids()
            [record] = runs.all()
            runs.request_stop(record.run_id)  # asked; the run has not seen it yet
            os.kill(pid, signal.SIGKILL)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
            await asyncio.sleep(1.0)
    [record] = records(redis_url)
    assert record.status is RunStatus.STOPPED and record.attempt == 1, record
    assert "its worker was lost meanwhile" in record.notes
    assert len(channel.announces) == 1 and "Status: stopped" in channel.announces[0].text


def approval_id(channel: MemoryChannel) -> str | None:
    for message in channel.sent:
        found = re.search(r"!approve ([0-9a-f]{8})\b", message.text)
        if found:
            return found[1]
    return None


async def test_a_run_parked_for_approval_outlives_its_host_and_its_resume_job_dying(
    redis_url: str, tmp_path: Path
) -> None:
    """The host dies while the run waits for a person (no job holds it: nothing to
    resume); after the approval, its resume job dies right after the approved call, and
    the run goes on: ``calculate`` is safe to repeat, so it runs again."""
    async with FakeOpenAI(approvals_model(), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, tools={"require_approval": ["calc*"]})
        failpoints = f"run.tool_done.calculate=kill!{tmp_path / 'fired'}"
        async with Stack(
            values=values, adapters=[channel], workers=1, failpoints=failpoints
        ) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: approval_id(channel) is not None, timeout=30)
            stack.pool.kill_all()
            stack.pool.start()
            await asyncio.sleep(stack.settings.subagents.stale_after_seconds + 2)  # reaper
            [record] = records(redis_url)
            assert record.status is RunStatus.RUNNING and record.parked_at is not None
            assert record.attempt == 1
            await channel.say(f"!approve {approval_id(channel)}")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await asyncio.sleep(1.0)
        last = sub_requests(fake)[-1]
    assert (tmp_path / "fired").exists()
    [record] = records(redis_url)
    text = channel.announces[0].text
    assert record.status is RunStatus.SUCCESS and record.attempt == 2, (record, text)
    assert "answer: 42" in text and len(channel.announces) == 1
    assert tool_results(last) == ["42"], last.messages
    assert sum(1 for m in channel.sent if "!approve" in m.text) == 1  # asked once
