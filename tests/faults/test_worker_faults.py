"""Workers die (SIGKILL) or are told to stop (SIGTERM) mid-run: every run ends once, announced
once; a run whose worker died goes on in a new attempt (tests/faults/test_run_resume.py).

Default heartbeat and staleness settings here, so the detection bounds (the launcher at
once, another host's reaper ~5 s) are tested as shipped, not with test-only fast timers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import redis

from bot.keys import Keys
from bot.store.jobs import Jobs
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ChatRequest, Hang, Reply, Text, is_subagent
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from bot.types import RunStatus
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner

pytestmark = pytest.mark.e2e

DEFAULT_TIMERS = {"heartbeat_seconds": 1.0, "stale_after_seconds": 4.0}


def statuses(redis_url: str) -> dict[str, RunStatus]:
    client = redis.Redis.from_url(redis_url)
    try:
        return {r.task: r.status for r in RunsRegistry(redis=client, keys=Keys()).all()}
    finally:
        client.close()


def running(redis_url: str) -> bool:
    """A subagent run is executing (its horse is up and its status says so)."""
    return RunStatus.RUNNING in statuses(redis_url).values()


def slots_taken(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.zcard(Jobs(redis=client).subagent_slot_key()))
    finally:
        client.close()


async def test_a_sigkilled_host_s_run_is_resumed_by_the_other_host_and_the_queued_run_follows(
    redis_url: str, tmp_path: Path
) -> None:
    """The host executing the run dies whole: the other host's reaper sees its heartbeat
    lapse and resumes it there (within ~6 s with the shipped timers: stale after 4 s); it
    kept its fair slot meanwhile, so the queued run starts only after it."""
    killed = asyncio.Event()
    kill_at: list[float] = []

    def subagent(request: ChatRequest) -> Reply:
        return Text(f"{request.last_user_message} done") if killed.is_set() else Hang(120)

    model = spawner(["first", "second"], subagent)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(
            redis_url, fake.base_url, subagents={"max_concurrent": 1, **DEFAULT_TIMERS}
        )
        other = WorkerPool(env=hermetic_env(values), count=1, log_path=tmp_path / "b.log")
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            other.start()
            try:
                await channel.say("go")
                pools = [stack.pool, other]
                await stack.wait_for(lambda: running(redis_url), timeout=20)
                picked: list[WorkerPool] = []  # the pool seen busy, by the look that saw it

                def busy() -> bool:
                    picked[:] = [p for p in pools if p.run_pids()][:1]
                    return bool(picked)

                await stack.wait_for(busy, timeout=10)
                victim = picked[0]
                survivor = other if victim is stack.pool else stack.pool
                first = next(t for t, s in statuses(redis_url).items() if s is RunStatus.RUNNING)
                # Its model call is in flight (hanging) before the kill: a kill before it
                # would leave the call to the next attempt; and the answer changes only once
                # the host is gone, or a slow kill would let attempt 1 finish on the new answer.
                await stack.wait_for(
                    lambda: any(is_subagent(r.chat) for r in fake.requests), timeout=20
                )
                kill_at.append(time.monotonic())
                victim.kill_all()  # launcher, worker and horse: the host is gone
                killed.set()
                await stack.wait_for(lambda: attempt_of(redis_url, first) == 2, timeout=30)
                resumed_in = time.monotonic() - kill_at[0]
                await stack.wait_for(lambda: len(channel.announces) == 2, timeout=45)
                assert survivor.launcher is not None and survivor.launcher.poll() is None
            finally:
                other.stop()
    assert statuses(redis_url) == {"first": RunStatus.SUCCESS, "second": RunStatus.SUCCESS}
    runs = {
        r.task: r for r in RunsRegistry(redis=redis.Redis.from_url(redis_url), keys=Keys()).all()
    }
    resumed, queued = runs[first], runs["second" if first == "first" else "first"]
    assert resumed.attempt == 2 and "no heartbeat" in resumed.attempt_ends[0], resumed
    # It kept its slot while its new attempt waited: the queued run started after it ended.
    assert queued.started_at is not None and resumed.ended_at is not None
    assert queued.started_at >= resumed.ended_at - 0.05, (queued, resumed)
    assert resumed_in < 12, f"the other host resumed the run after {resumed_in:.1f}s"
    assert slots_taken(redis_url) == 0
    print(f"SIGKILL host -> resumed by the other host's reaper in {resumed_in:.1f}s")


def attempt_of(redis_url: str, task: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        found = [r for r in RunsRegistry(redis=client, keys=Keys()).all() if r.task == task]
        return found[0].attempt if found else 0
    finally:
        client.close()


async def test_sigterm_mid_run_lets_the_run_finish_and_announce_once(redis_url: str) -> None:
    model = spawner(["finish me"], lambda r: Text("finished after all", delay=3))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=DEFAULT_TIMERS)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: running(redis_url), timeout=20)
            launcher = stack.pool.launcher
            assert launcher is not None
            launcher.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(launcher.wait, 30)
            await stack.wait_for(lambda: len(channel.announces) >= 1, timeout=10)
            await asyncio.sleep(1.0)  # a second announce, if any, would be here by now
    assert code == 0
    assert len(channel.announces) == 1
    assert "Status: success" in channel.announces[0].text
    assert "finished after all" in channel.announces[0].text
    assert statuses(redis_url) == {"finish me": RunStatus.SUCCESS}
    assert slots_taken(redis_url) == 0


async def test_sigterm_past_the_grace_stops_the_run_cleanly(redis_url: str) -> None:
    model = spawner(["never ends"], lambda r: Hang(120))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(
            redis_url,
            fake.base_url,
            subagents={**DEFAULT_TIMERS, "shutdown_grace_seconds": 1, "hard_kill_grace_seconds": 1},
        )
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: running(redis_url), timeout=20)
            launcher = stack.pool.launcher
            assert launcher is not None
            started = time.monotonic()
            launcher.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(launcher.wait, 30)
            stopped_in = time.monotonic() - started
            await stack.wait_for(lambda: len(channel.announces) >= 1, timeout=10)
            await asyncio.sleep(1.0)  # negative check: a second announce would be here by now
    assert code == 0
    assert len(channel.announces) == 1
    text = channel.announces[0].text
    assert "Status: stopped" in text and "a worker shutdown" in text, text
    assert statuses(redis_url) == {"never ends": RunStatus.STOPPED}
    assert slots_taken(redis_url) == 0
    print(f"SIGTERM past the grace -> stopped and the launcher exited in {stopped_in:.1f}s")


def _worker_running_the_run(pool: WorkerPool) -> tuple[int, int | None]:
    """``(worker pid, horse pid)`` of the one worker executing a job (no horse in the
    threads pool: the worker runs it)."""
    import psutil

    if pool.threads:
        running = pool.run_pids()
        if running:
            return running[0], None
    for pid in pool.worker_pids():
        horses = psutil.Process(pid).children()
        if horses:
            return pid, horses[0].pid
    raise AssertionError("no worker is running a job")


async def test_a_sigkilled_worker_and_horse_on_a_live_host_are_resumed_by_the_launcher_at_once(
    redis_url: str,
) -> None:
    """The launcher sees its worker die and resumes that worker's run at once (not when the
    heartbeat expires: within 2 s), and keeps supervising."""
    asked: list[ChatRequest] = []

    def subagent(request: ChatRequest) -> Reply:
        asked.append(request)
        return Hang(120) if len(asked) == 1 else Text("first done")

    model = spawner(["first"], subagent)
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=DEFAULT_TIMERS)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("go")
            await stack.wait_for(lambda: running(redis_url), timeout=20)
            await stack.wait_for(lambda: fake.in_flight == 1, timeout=10)
            worker, horse = _worker_running_the_run(stack.pool)
            if horse is not None:
                os.kill(horse, signal.SIGKILL)
            os.kill(worker, signal.SIGKILL)
            killed_at = time.monotonic()
            await stack.wait_for(lambda: attempt_of(redis_url, "first") == 2, timeout=30)
            resumed_in = time.monotonic() - killed_at
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
            await asyncio.sleep(1.0)  # a second announce, if any, would be here by now
            launcher = stack.pool.launcher
            assert launcher is not None and launcher.poll() is None
    text = channel.announces[0].text
    assert len(channel.announces) == 1
    assert "Status: success" in text and "first done" in text, text
    assert statuses(redis_url) == {"first": RunStatus.SUCCESS}
    assert slots_taken(redis_url) == 0
    assert resumed_in < 4, f"the launcher resumed the run after {resumed_in:.1f}s"
    print(f"SIGKILL worker -> resumed by its launcher in {resumed_in:.1f}s")


async def test_sigkilled_worker_whose_horse_lives_on_lets_the_run_finish(redis_url: str) -> None:
    """Only the worker process dies: its horse still runs the run, so nobody ends it early
    (the fork pool's: in the threads pool the worker is the run's process)."""
    model = spawner(["outlive"], lambda r: Text("finished by the orphan", delay=3))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=DEFAULT_TIMERS)
        async with Stack(values=values, adapters=[channel], workers=1, pool="fork") as stack:
            await channel.say("go")
            await stack.wait_for(lambda: running(redis_url), timeout=20)
            worker, _horse = _worker_running_the_run(stack.pool)
            os.kill(worker, signal.SIGKILL)
            await stack.wait_for(lambda: len(channel.announces) >= 1, timeout=30)
            await asyncio.sleep(1.0)  # a second announce, if any, would be here by now
    assert len(channel.announces) == 1
    assert "Status: success" in channel.announces[0].text, channel.announces[0].text
    assert statuses(redis_url) == {"outlive": RunStatus.SUCCESS}
