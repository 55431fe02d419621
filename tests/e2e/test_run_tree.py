"""Run trees on forked workers: orchestrators park while their children run and resume
with the results; only the root announces; a stop cascades; a killed child is resumed."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import redis

from bot.keys import Keys
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from bot.types import FAN_IN_MARK, RunRecord, RunStatus
from tests.e2e.conftest import stack_values

LEAD = {
    "name": "lead",
    "description": "Leads a task and splits it.",
    "role": "orchestrator",
    "system_prompt": "LEAD. Split the task with sessions_spawn, then combine.",
}


def tree_model(leaf: Any, *, fan: int = 2) -> ScriptedModel:
    """Main agent: one lead run. A lead at level N spawns ``fan`` runs of level N+1 (leads
    at level 2, leaves at level 3), then combines what its fan-in brings."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("started the lead")
        return ToolCalls([Call("sessions_spawn", {"task": "level1", "subagent_type": "lead"})])

    def lead(req: ChatRequest) -> Reply:
        said = req.last_user_message
        if said.startswith(FAN_IN_MARK):
            statuses = [ln.rsplit(": ", 1)[1] for ln in said.splitlines() if ln.startswith("- ")]
            return Text(f"combined {sorted(statuses)}")
        if req.last_role == "tool":
            return Text("waiting for my parts")
        level = int(next(w for w in said.split() if w.startswith("level"))[5:])
        kind = "lead" if level == 1 else "general-purpose"
        calls = [
            Call(
                "sessions_spawn",
                {
                    "task": f"level{level + 1} part {i}",
                    "subagent_type": kind,
                    "label": f"L{level + 1}.{i}",
                },
            )
            for i in range(fan)
        ]
        return ToolCalls(calls)

    return (
        ScriptedModel()
        .on(lambda r: "LEAD." in r.system_prompt, lead)
        .on(lambda r: "You are fanbot" in r.system_prompt, main)
        .on(lambda r: True, leaf)
    )


def values(redis_url: str, base_url: str, **sub: Any) -> dict[str, Any]:
    return stack_values(
        redis_url,
        base_url,
        subagents={"max_spawn_depth": 3, **sub},
        subagent_types=[LEAD],
    )


def registry(redis_url: str) -> RunsRegistry:
    return RunsRegistry(redis=redis.Redis.from_url(redis_url), keys=Keys())


def by_label(runs: RunsRegistry) -> dict[str, RunRecord]:
    return {r.label or r.task: r for r in runs.all()}


async def test_a_depth_three_tree_parks_resumes_and_only_the_root_announces(
    redis_url: str,
) -> None:
    model = tree_model(lambda r: Text(f"leaf {r.last_user_message}", delay=0.3))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        async with Stack(
            values=values(redis_url, fake.base_url), adapters=[channel], workers=3
        ) as stack:
            await channel.say("build it")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
            await channel.say("/subagents list")
            await stack.wait_for(lambda: len(channel.replies) == 2, timeout=10)
            await asyncio.sleep(1.0)
        every = registry(redis_url).all()
        runs = by_label(registry(redis_url))
    assert len(channel.announces) == 1  # children report to their parents only
    root = runs["level1"]
    assert "combined ['success', 'success']" in channel.announces[0].text
    assert root.status is RunStatus.SUCCESS and root.depth == 1 and root.rounds == 1
    for part in ("L2.0", "L2.1"):
        assert runs[part].parent_run_id == root.run_id and runs[part].depth == 2
        assert runs[part].root_run_id == root.run_id
        assert runs[part].result == "combined ['success', 'success']"
    leaves = [r for r in every if r.depth == 3]
    assert len(leaves) == 4 and all(r.root_run_id == root.run_id for r in leaves)
    listing = channel.replies[-1].text.splitlines()
    assert listing[1].startswith(f"#{root.seq} ✅ success · level1")
    assert sum(1 for line in listing if line.startswith("  └ #")) == 2
    assert sum(1 for line in listing if line.startswith("    └ #")) == 4
    assert all(" tok" in line for line in listing[1:])


async def test_stopping_the_root_stops_the_whole_tree_and_nothing_announces_after(
    redis_url: str,
) -> None:
    model = tree_model(lambda r: Hang(60))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        runs = registry(redis_url)
        async with Stack(
            values=values(redis_url, fake.base_url), adapters=[channel], workers=5
        ) as stack:
            await channel.say("build it")
            await stack.wait_for(lambda: fake.in_flight == 4, timeout=60)  # four leaves hang
            root = by_label(runs)["level1"]
            await channel.say(f"/subagents stop {root.seq}")
            await stack.wait_for(lambda: all(r.status.terminal for r in runs.all()), timeout=20)
            await stack.wait_for(lambda: fake.in_flight == 0, timeout=20)
            await asyncio.sleep(2.0)
    assert len(runs.all()) == 7
    assert {r.status for r in runs.all()} == {RunStatus.STOPPED}
    [announce] = channel.announces
    assert "Status: stopped" in announce.text and '"level1"' in announce.text
    leaf = next(r for r in runs.all() if r.depth == 3)
    assert "its parent #" in leaf.notes and "was stopped" in leaf.notes


async def test_a_killed_child_under_a_depth_two_parent_is_resumed_and_reported_up_the_tree(
    redis_url: str,
) -> None:
    asked: list[ChatRequest] = []

    def leaf(request: ChatRequest) -> Reply:
        asked.append(request)
        return Hang(60) if len(asked) == 1 else Text("leaf done")

    model = tree_model(leaf, fan=1)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        runs = registry(redis_url)
        vals = values(redis_url, fake.base_url, stale_after_seconds=60)
        async with Stack(values=vals, adapters=[channel], workers=3) as stack:
            await channel.say("build it")
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=60)
            [horse] = stack.pool.run_pids()  # the leaf's: both leads are parked
            os.kill(horse, signal.SIGKILL)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
    records = by_label(runs)
    assert records["L3.0"].status is RunStatus.SUCCESS and records["L3.0"].attempt == 2
    assert records["L2.0"].result == "combined ['success']"
    assert "combined ['success']" in channel.announces[0].text
