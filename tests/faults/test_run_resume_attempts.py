"""The bounds of resuming a run whose worker died (issue 26), continued from
``test_run_resume_bounds.py`` (split so that the two halves run side by side): a parent
and its child, a resumed run stopped, its timeout, a compiled runnable."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from bot.agent.resume import INTERRUPTED
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from bot.types import FAN_IN_MARK, RunStatus
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner
from tests.faults.resume_script import records, registry, sub_requests, tool_results

pytestmark = pytest.mark.e2e


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


async def test_a_compiled_runnable_starts_again_from_its_beginning(
    redis_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "began"
    crashy = {"name": "crashy", "description": "Dies once.",
              "runnable": "tests.compiled_runnables:crash_once"}  # fmt: skip
    model = ScriptedModel().on(
        lambda r: r.has_tool("sessions_spawn"),
        lambda r: (
            Text("on it")
            if r.last_role == "tool"
            else ToolCalls(
                [Call("sessions_spawn", {"task": f"run {marker}", "subagent_type": "crashy"})]
            )
        ),
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagent_types=[crashy])
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            [record] = records(redis_url)
    text = channel.announces[0].text
    assert "Status: success" in text and "Result: began 2 times" in text, text
    assert record.attempt == 2 and marker.read_text() == "xx"
