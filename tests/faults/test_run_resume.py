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
import os
import re
import signal
from pathlib import Path

import pytest
import redis

from bot.agent.resume import INTERRUPTED
from bot.keys import Keys
from bot.runs.recover import resumed_line
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from bot.text.units import tokens
from bot.types import FAN_IN_MARK, RunRecord, RunStatus, Usage
from tests.e2e.approvals_script import model as approvals_model
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


LEAD = {
    "name": "lead",
    "description": "Leads a task and splits it.",
    "role": "orchestrator",
    "system_prompt": "LEAD. Split the task with sessions_spawn, then combine.",
}


def lead_model() -> ScriptedModel:
    """Main agent: one lead run; the lead spawns one leaf, then combines its fan-in."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("started the lead")
        return ToolCalls([Call("sessions_spawn", {"task": "lead it", "subagent_type": "lead"})])

    def lead(req: ChatRequest) -> Reply:
        said = req.last_user_message
        if said.startswith(FAN_IN_MARK):
            statuses = [ln.rsplit(": ", 1)[1] for ln in said.splitlines() if ln.startswith("- ")]
            return Text(f"combined {sorted(statuses)}")
        if req.last_role == "tool":
            return Text("waiting for my part")
        return ToolCalls([Call("sessions_spawn", {"task": "the part", "label": "leaf"})])

    return (
        ScriptedModel()
        .on(lambda r: "LEAD." in r.system_prompt, lead)
        .on(lambda r: "You are fanbot" in r.system_prompt, main)
        .on(lambda r: True, [Hang(60), Text("part done")], times=None)
    )


async def test_a_parent_killed_after_spawning_waits_for_its_child_in_the_next_attempt(
    redis_url: str, tmp_path: Path
) -> None:
    """The lead dies right after its spawn ran (result not recorded): its next attempt is
    told the spawn was interrupted, does not spawn again, and still gets the child's
    fan-in; a child killed while the lead is parked waiting is resumed too."""
    async with FakeOpenAI(lead_model(), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(
            redis_url, fake.base_url, subagents={"max_spawn_depth": 2}, subagent_types=[LEAD]
        )
        failpoints = f"run.tool_done.sessions_spawn=kill!{tmp_path / 'spawned'}"
        async with Stack(
            values=values, adapters=[channel], workers=2, failpoints=failpoints
        ) as stack:
            await channel.say("build it")
            runs = registry(redis_url)

            def lead_waits_and_leaf_hangs() -> bool:
                lead = next((r for r in runs.all() if r.subagent_type == "lead"), None)
                return lead is not None and lead.parked_at is not None and fake.in_flight == 1

            await stack.wait_for(lead_waits_and_leaf_hangs, timeout=60)
            await stack.wait_for(lambda: len(stack.pool.run_pids()) == 1, timeout=10)
            [pid] = stack.pool.run_pids()  # the leaf's: the lead is parked
            os.kill(pid, signal.SIGKILL)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await asyncio.sleep(1.0)
        lead_requests = [r.chat for r in fake.requests if "LEAD." in r.chat.system_prompt]
    by_label = {r.label or r.task: r for r in records(redis_url)}
    assert (tmp_path / "spawned").exists()
    assert sorted(by_label) == ["lead it", "leaf"], by_label  # spawned once
    lead, leaf = by_label["lead it"], by_label["leaf"]
    assert lead.status is RunStatus.SUCCESS and lead.attempt == 2, lead
    assert leaf.status is RunStatus.SUCCESS and leaf.parent_run_id == lead.run_id
    assert leaf.attempt >= 2, leaf
    assert lead.result == "combined ['success']"
    assert "combined ['success']" in channel.announces[0].text
    assert len(channel.announces) == 1
    assert any(INTERRUPTED in tool_results(r) for r in lead_requests)


async def test_a_resumed_run_can_be_stopped(redis_url: str) -> None:
    """A stop reaches the attempt that executes the run now (its recovery job)."""
    model = spawner(["hang twice"], lambda r: Hang(60))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            runs = registry(redis_url)
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=30)
            await stack.wait_for(lambda: len(stack.pool.run_pids()) == 1, timeout=10)
            os.kill(stack.pool.run_pids()[0], signal.SIGKILL)
            await stack.wait_for(lambda: [r.attempt for r in runs.all()] == [2], timeout=20)
            await stack.wait_for(lambda: len(sub_requests(fake)) == 2, timeout=20)
            await channel.say("/subagents stop 1")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
            await stack.wait_for(lambda: fake.in_flight == 0, timeout=20)  # its call ended
            await asyncio.sleep(1.0)
    [record] = records(redis_url)
    assert record.status is RunStatus.STOPPED and record.attempt == 2, record
    assert len(channel.announces) == 1 and "Status: stopped" in channel.announces[0].text


async def test_a_resumed_run_s_timeout_counts_from_its_first_start(redis_url: str) -> None:
    model = spawner(["slow"], lambda r: Hang(60), runTimeoutSeconds=8)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            runs = registry(redis_url)
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=30)
            await stack.wait_for(lambda: len(stack.pool.run_pids()) == 1, timeout=10)
            await asyncio.sleep(3.0)
            os.kill(stack.pool.run_pids()[0], signal.SIGKILL)
            await stack.wait_for(lambda: [r.attempt for r in runs.all()] == [2], timeout=20)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
    [record] = records(redis_url)
    assert record.status is RunStatus.TIMEOUT and record.attempt == 2, record
    assert record.started_at is not None and record.ended_at is not None
    took = record.ended_at - record.started_at
    assert 7.5 <= took < 12, f"it timed out {took:.1f}s after its first start (limit 8s)"
