"""TrackedExecutor: a process that owns a private Redis lets the calls still running in
threads return before it stops that Redis (a call cut off from it would retry for half a
minute, and the process could not exit meanwhile: the console's exit after Ctrl-C)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from bot.redis.connect import connect
from bot.redis.server import RedisServer
from bot.supervise.aio import TrackedExecutor


def test_idle_waits_for_the_calls_running_and_says_when_one_outlasts_it() -> None:
    release = threading.Event()

    async def scenario() -> tuple[int, bool, bool, int]:
        pool = TrackedExecutor(max_workers=2)
        asyncio.get_running_loop().set_default_executor(pool)
        call = asyncio.ensure_future(asyncio.to_thread(release.wait, 5))
        await asyncio.sleep(0.05)
        busy = pool.busy
        outlasted = await pool.idle(0.1)
        release.set()
        drained = await pool.idle(5)
        await call
        return busy, outlasted, drained, pool.busy

    assert asyncio.run(scenario()) == (1, False, True, 0)


def test_a_call_in_a_thread_ends_before_the_private_redis_stops(tmp_path: Path) -> None:
    """A task cancelled while its call runs in a thread (the console's live area at
    Ctrl-C): the call still completes against Redis, none is cut off by its stop."""
    outcome: list[str] = []

    async def scenario() -> None:
        pool = TrackedExecutor()
        asyncio.get_running_loop().set_default_executor(pool)
        server = RedisServer(data_dir=tmp_path / "redis").start()
        client = connect(server.url)

        def reads() -> None:
            try:
                until = time.monotonic() + 0.5
                while time.monotonic() < until:
                    client.get("x")
                outcome.append("done")
            except Exception as exc:  # cut off by the stop: it retried for half a minute
                outcome.append(type(exc).__name__)

        task = asyncio.ensure_future(asyncio.to_thread(reads))
        await asyncio.sleep(0.1)
        task.cancel()  # the task ends; its thread does not
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.busy == 1
        assert await pool.idle(5)
        await asyncio.to_thread(server.stop)
        client.close()

    asyncio.run(scenario())
    assert outcome == ["done"]
