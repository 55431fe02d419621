"""Fair sharing of the subagent slots between threads, on forked workers and the fake model."""

from __future__ import annotations

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from bot.types import RunRecord
from tests.e2e.conftest import stack_values


def spawner(seconds: float) -> ScriptedModel:
    """The main agent spawns ``N`` runs for a message ``spawn N``; each run takes ``seconds``."""

    def spawn_or_confirm(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        n = int(req.last_user_message.split()[-1])
        return ToolCalls([Call("sessions_spawn", {"task": f"task {i}"}) for i in range(n)])

    return (
        ScriptedModel()
        .on(is_subagent, lambda req: Text("done", delay=seconds))
        .on(lambda r: r.has_tool("sessions_spawn"), spawn_or_confirm)
    )


def runs_of(deps: Deps, channel: MemoryChannel, name: str) -> list[RunRecord]:
    return [r for r in deps.runs.all() if r.thread == channel.thread(name)]


async def test_a_second_thread_gets_the_next_free_slot_not_the_end_of_the_line(
    redis_url: str,
) -> None:
    async with FakeOpenAI(spawner(1.2), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url, fake.base_url, subagents={"max_concurrent": 2, "max_spawns_per_turn": 20}
        )
        channel = MemoryChannel()
        deps = Deps.build(Settings(redis_url=redis_url), client=redis.Redis.from_url(redis_url))
        try:
            async with Stack(values=values, adapters=[channel], workers=3) as stack:
                await channel.say("spawn 20", thread=channel.thread("A"))
                await stack.wait_for(lambda: len(runs_of(deps, channel, "A")) == 20, timeout=30)
                await channel.say("spawn 1", thread=channel.thread("B"))
                await stack.wait_for(lambda: len(runs_of(deps, channel, "B")) == 1, timeout=30)
                await stack.wait_for(lambda: len(channel.announces) == 21, timeout=90)
            a_runs = runs_of(deps, channel, "A")
            [b] = runs_of(deps, channel, "B")
        finally:
            deps.close()
    assert b.started_at is not None
    a_started = sorted(r.started_at for r in a_runs if r.started_at is not None)
    assert len(a_started) == 20
    # FIFO would start B after all twenty; fair sharing gives it the next freed slot
    # (one A run may have been admitted in the instant between B's record and its line).
    overtook = [t for t in a_started if b.created_at < t < b.started_at]
    after = sum(t > b.started_at for t in a_started)
    print(
        f"B waited {b.started_at - b.created_at:.2f}s; A runs started meanwhile: "
        f"{len(overtook)}; A runs started after B: {after} of 20"
    )
    assert len(overtook) <= 1, (overtook, b.created_at, b.started_at)
    assert after >= 10
    assert fake.max_overlap(lambda r: is_subagent(r.chat)) == 2
    assert all("Status: success" in a.text for a in channel.announces)


def overlap(records: list[RunRecord]) -> int:
    """The most of ``records`` running at one instant (from their start and end times)."""
    edges = sorted(
        (t, d)
        for r in records
        if r.started_at is not None and r.ended_at is not None
        for t, d in ((r.started_at, 1), (r.ended_at, -1))
    )
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


async def test_a_session_at_its_cap_waits_while_another_uses_the_free_slots(
    redis_url: str,
) -> None:
    async with FakeOpenAI(spawner(1.5), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            subagents={"max_concurrent": 4, "max_concurrent_per_session": 2},
        )
        channel = MemoryChannel()
        deps = Deps.build(Settings(redis_url=redis_url), client=redis.Redis.from_url(redis_url))
        try:
            async with Stack(values=values, adapters=[channel], workers=5) as stack:
                await channel.say("spawn 6", thread=channel.thread("A"))
                await stack.wait_for(lambda: len(runs_of(deps, channel, "A")) == 6, timeout=30)
                await channel.say("spawn 2", thread=channel.thread("B"))
                await stack.wait_for(lambda: len(channel.announces) == 8, timeout=60)
            a_runs = runs_of(deps, channel, "A")
            b_runs = runs_of(deps, channel, "B")
        finally:
            deps.close()
    assert overlap(a_runs) == 2  # A alone never holds more than its cap ...
    assert overlap(b_runs) == 2  # ... while B uses two of the slots A could not take
    assert overlap(a_runs + b_runs) == 4
    assert fake.max_overlap(lambda r: is_subagent(r.chat)) <= 4
    assert all("Status: success" in a.text for a in channel.announces)


async def test_stopping_a_waiting_run_lets_the_next_one_start(redis_url: str) -> None:
    async with FakeOpenAI(spawner(1.5), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url, subagents={"max_concurrent": 1})
        channel = MemoryChannel()
        deps = Deps.build(Settings(redis_url=redis_url), client=redis.Redis.from_url(redis_url))
        try:
            async with Stack(values=values, adapters=[channel], workers=2) as stack:
                thread = channel.thread("A")
                await channel.say("spawn 3", thread=thread)
                await stack.wait_for(lambda: len(runs_of(deps, channel, "A")) == 3, timeout=30)
                await channel.say("/subagents stop 2", thread=thread)
                await stack.wait_for(lambda: len(channel.announces) == 3, timeout=40)
            runs = {r.seq: r for r in runs_of(deps, channel, "A")}
        finally:
            deps.close()
    assert runs[2].status.value == "stopped" and runs[2].started_at is None
    assert runs[1].status.value == runs[3].status.value == "success"
    assert runs[3].started_at is not None and runs[1].ended_at is not None
    assert runs[3].started_at >= runs[1].ended_at - 0.1  # the one slot, handed on
    assert fake.max_overlap(lambda r: is_subagent(r.chat)) == 1


async def test_a_test_failing_inside_the_stack_prints_where_its_runs_stood(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wait that times out in an end-to-end test says which runs were where (records,
    fair slots and line, job statuses) and what the workers logged last."""
    async with FakeOpenAI(spawner(30), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url, fake.base_url, subagents={"max_concurrent": 1, "shutdown_grace_seconds": 1}
        )
        channel = MemoryChannel()
        with pytest.raises(TimeoutError):
            async with Stack(values=values, adapters=[channel], workers=1) as stack:
                await channel.say("spawn 2", thread=channel.thread("A"))
                deps = stack.gateway.deps if stack.gateway else None
                assert deps is not None

                def one_running_one_queued() -> bool:
                    runs = deps.runs.get_many(sorted(deps.runs.active_ids()))
                    return sorted(r.status.value for r in runs) == ["queued", "running"]

                await stack.wait_for(one_running_one_queued, timeout=60)
                await stack.wait_for(lambda: len(channel.announces) == 2, timeout=0.5)
    state = capsys.readouterr().err
    assert "--- fanbot stack state ---" in state
    assert state.count(" running parked_at=None") == 1 and state.count(" queued ") == 1
    assert "fair: held={'" in state and "--- workers.log (tail) ---" in state


@pytest.mark.parametrize("pool", ["fork", "threads"])
async def test_explain_shows_where_each_run_stands(redis_url: str, pool: str) -> None:
    """What a failing test inside a Stack prints: each active run (status, parked_at,
    approval, resume job), the fair slots and line, the jobs' statuses, the workers and
    the tail of their log."""
    async with FakeOpenAI(spawner(30), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url, subagents={"max_concurrent": 1})
        channel = MemoryChannel()
        async with Stack(values=values, adapters=[channel], workers=1, pool=pool) as stack:
            await channel.say("spawn 2")
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=30)
            text = stack.explain(log_lines=5)
    lines = text.splitlines()
    assert lines[0] == "--- fanbot stack state ---"
    runs = [line for line in lines if line.startswith("run ")]
    assert len(runs) == 2
    assert sorted(r.split()[3] for r in runs) == ["queued", "running"]
    assert all("parked_at=None approval=- resume_job=" in r for r in runs)
    fair = next(line for line in lines if line.startswith("fair: "))
    assert "held=" in fair and "waiting=" in fair
    assert any(line.startswith("job ") and "started" in line for line in lines), text
    workers = next(line for line in lines if line.startswith("workers: "))
    assert workers.startswith(f"workers: {pool} pool, pids [")
    assert "executing [" in workers and "executing []" not in workers
    tail = lines[lines.index("--- workers.log (tail) ---") + 1 :]
    assert 0 < len(tail) <= 5
