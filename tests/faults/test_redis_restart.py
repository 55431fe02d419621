"""Redis restarts (AOF on) while runs are in flight: nothing is lost, everyone reconnects.

The test has its own ``redis-server`` (the session one must not be restarted under other
tests) and SIGKILLs it, the harder case than a clean restart (covered by
``tests/integration/test_redis_server.py``): with ``appendfsync everysec`` Redis has written
each command to the AOF (the kernel's page cache) before it replies, so a process kill loses
nothing acknowledged; only a machine crash could lose the last second.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from bot.config import GatewaySettings
from bot.gateway.delivery import Policy
from bot.gateway.egress import Egress
from bot.gateway.runtime import async_client
from bot.gateway.sender import Deliverer
from bot.keys import Keys
from bot.ports import PartLog
from bot.redis.server import RedisServer
from bot.store.outbox import Outbox, OutboxWriter
from bot.store.runs import RunsRegistry
from bot.supervise.aio import cancel_all
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ScriptedModel, Text
from bot.testing.stack import Stack
from bot.testing.wait import until
from bot.types import Outbound, RunStatus, ThreadRef
from tests.e2e.conftest import stack_values
from tests.e2e.test_failures import spawner

pytestmark = pytest.mark.e2e

TASKS = ["alpha", "beta", "gamma", "delta"]


def snapshot(url: str) -> dict[str, object]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        keys = Keys()
        records = RunsRegistry(redis=client, keys=keys).all()
        history = [k for k in client.scan_iter(f"{keys.prefix}session:*:history")]
        return {
            "runs": {r.run_id: r.status for r in records},
            "attempts": sorted({r.attempt for r in records}),
            "history": sum(client.llen(k) for k in history),  # type: ignore[misc]
            "outbox": client.xlen(keys.outbox),
        }
    finally:
        client.close()


def model() -> ScriptedModel:
    main = spawner(TASKS, lambda r: Text(f"result of {r.last_user_message}", delay=3))
    return main


async def test_redis_sigkilled_and_restarted_mid_flight_loses_nothing(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path / "redis").start()
    try:
        async with FakeOpenAI(model(), models=["fake-model"]) as fake:
            channel = MemoryChannel()
            # Shipped heartbeat timers: a run must not be declared dead over a Redis restart.
            timers = {"heartbeat_seconds": 1.0, "stale_after_seconds": 4.0}
            values = stack_values(server.url, fake.base_url, subagents=timers)
            async with Stack(values=values, adapters=[channel], workers=2) as stack:
                await channel.say("fan out")
                await stack.wait_for(
                    lambda: (
                        list(snapshot(server.url)["runs"].values()).count(RunStatus.RUNNING)  # type: ignore[attr-defined]
                        >= 2
                    ),
                    timeout=30,
                )
                before = snapshot(server.url)
                server.kill()
                await asyncio.sleep(1.0)  # down for a second while the runs keep going
                server.start()
                await stack.wait_for(lambda: len(channel.announces) == len(TASKS), timeout=60)
                # Everyone reconnected: a new turn in a new thread works end to end.
                await channel.say("fan out again", thread=channel.thread("second"))
                await stack.wait_for(lambda: len(channel.announces) == 2 * len(TASKS), timeout=60)
                await asyncio.sleep(1.0)  # a duplicate, if any, would be here by now
                after = snapshot(server.url)
    finally:
        server.stop()
    assert set(before["runs"]) <= set(after["runs"])  # type: ignore[arg-type]
    assert list(after["runs"].values()) == [RunStatus.SUCCESS] * 2 * len(TASKS)  # type: ignore[attr-defined]
    assert after["history"] >= before["history"]  # type: ignore[operator]
    assert after["attempts"] == [1]  # no live run was taken for lost and resumed
    posted = [(a.thread, a.text) for a in channel.announces]
    assert len(posted) == len(set(posted)) == 2 * len(TASKS)  # each once
    assert all("Status: success" in text for _, text in posted)


class SlowFirstSend(MemoryChannel):
    """Takes a second over its first send, so Redis dies while that send is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = asyncio.Event()

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        if not self.in_flight.is_set():
            self.in_flight.set()
            await asyncio.sleep(1.0)
        return await super().send(message, parts=parts)


@pytest.mark.parametrize("outage", [1.0, 8.0], ids=["short", "longer-than-client-retries"])
async def test_announces_arrive_within_seconds_of_a_redis_restart(
    tmp_path: Path, outage: float
) -> None:
    """A delivery in flight when Redis dies, and an announce written right after Redis came
    back (same thread), both arrive once, in order, within seconds: neither waits for the
    30 s reclaim timer on a connection the restart closed."""
    server = RedisServer(data_dir=tmp_path / "redis").start()
    client = async_client(server.url)
    channel = SlowFirstSend()
    settings = GatewaySettings()  # reclaim_idle_seconds=30: far beyond the bound below
    egress = Egress(
        sender=Deliverer(
            outbox=Outbox(redis=client, keys=Keys()),
            adapters={"console": channel},
            policy=Policy.of(settings),
            consumer="gw-restart",
        ),
        settings=settings,
    )
    task = asyncio.create_task(egress.run())
    try:
        put(server.url, "in flight")
        await asyncio.wait_for(channel.in_flight.wait(), 10)
        server.kill()
        await asyncio.sleep(outage)  # the outage itself (the scenario, not a wait)
        server.start()
        put(server.url, "written after the restart")
        await until(lambda: len(channel.sent) >= 2, timeout=10)
        await until(egress.drained, timeout=10)
        texts = [m.text for m in channel.sent]
    finally:
        await cancel_all([task])
        await egress.close()
        await client.aclose()
        server.stop()
    assert texts == ["in flight", "written after the restart"]


def put(url: str, text: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        thread = ThreadRef(platform="console", account="local", chat="c", thread="t")
        outbox = OutboxWriter(redis=client, keys=Keys())
        outbox.put(Outbound(thread=thread, text=text, idempotency_key=text))
    finally:
        client.close()
