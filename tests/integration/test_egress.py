"""Egress against real Redis: retries, dead letters, idempotency, ordering, reclaim."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis

from bot.config import GatewaySettings
from bot.errors import DeliveryError
from bot.gateway.delivery import Policy
from bot.gateway.egress import Egress
from bot.gateway.sender import Deliverer
from bot.keys import Keys
from bot.ports import PartLog
from bot.store.outbox import Outbox
from bot.testing import MemoryChannel, until
from bot.types import Outbound, ThreadRef

KEYS = Keys()


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


def message(text: str, key: str, thread: str = "t") -> Outbound:
    ref = ThreadRef(platform="console", account="a", chat="c", thread=thread)
    return Outbound(thread=ref, text=text, idempotency_key=key)


async def put(client: aioredis.Redis, *messages: Outbound) -> None:
    for m in messages:
        await client.xadd(KEYS.outbox, {"data": json.dumps(m.to_json())})


async def run_egress(
    client: aioredis.Redis,
    channel: MemoryChannel,
    done: Callable[[Egress], object],
    **settings: object,
) -> Egress:
    """Run an egress until ``done(egress)`` holds and every entry is acknowledged."""
    gateway = GatewaySettings(delivery_backoff_seconds=0.05, **settings)  # type: ignore[arg-type]
    egress = Egress(
        sender=Deliverer(
            outbox=Outbox(redis=client, keys=KEYS),
            adapters={"console": channel},
            policy=Policy.of(gateway),
            consumer="test",
        ),
        settings=gateway,
    )
    task = asyncio.create_task(egress.run())
    try:
        await until(lambda: done(egress), timeout=10)
        # Every entry read and acknowledged: nothing can be sent again after this.
        await until(egress.drained, timeout=10)
    finally:
        task.cancel()
        await egress.close()
    return egress


async def test_retry_after_is_honoured_and_delivery_happens_once(aredis: aioredis.Redis) -> None:
    channel = MemoryChannel()
    channel.fail_next([DeliveryError("429", retry_after=0.3), DeliveryError("503")])
    await put(aredis, message("hello", "k1"))
    egress = await run_egress(aredis, channel, lambda e: channel.sent)
    assert [m.text for m in channel.sent] == ["hello"] and channel.attempts == 3
    assert await egress.drained()


async def test_same_idempotency_key_is_delivered_once(aredis: aioredis.Redis) -> None:
    channel = MemoryChannel()
    await put(aredis, message("a", "same"), message("a", "same"), message("b", "other"))
    await run_egress(aredis, channel, lambda e: len(channel.sent) >= 2)
    assert [m.text for m in channel.sent] == ["a", "b"]


async def test_dead_letter_after_budget_and_for_permanent_errors(aredis: aioredis.Redis) -> None:
    channel = MemoryChannel()
    channel.fail_next([DeliveryError("down")] * 3)
    await put(aredis, message("x", "k-x"))
    await run_egress(aredis, channel, lambda e: e.drained(), delivery_attempts=3)
    channel.fail_next([DeliveryError("no such chat", permanent=True)])
    await put(aredis, message("y", "k-y"))
    await aredis.xadd(KEYS.outbox, {"data": "{not json"})
    egress = await run_egress(aredis, channel, lambda e: e.drained(), delivery_attempts=3)
    dead = await aredis.xrange(KEYS.dead_letter)
    reasons = [fields["reason"] for _, fields in dead]
    assert channel.sent == [] and channel.attempts == 4
    assert sorted(reasons) == [
        "down (after 3 attempt(s))",
        "malformed entry",
        "no such chat (after 1 attempt(s))",
    ]
    assert await egress.drained()


async def test_order_is_kept_per_thread_while_another_thread_waits(aredis: aioredis.Redis) -> None:
    class SlowA(MemoryChannel):
        failed = False

        async def send(self, m: Outbound, *, parts: PartLog | None = None) -> list[str]:
            if m.thread.thread == "A" and not self.failed:
                self.failed = True
                raise DeliveryError("slow", retry_after=0.5)
            return await super().send(m, parts=parts)

    channel = SlowA()
    await put(aredis, message("a1", "a1", "A"), message("b1", "b1", "B"), message("a2", "a2", "A"))
    await run_egress(aredis, channel, lambda e: len(channel.sent) == 3)
    texts = [m.text for m in channel.sent]
    assert texts.index("a1") < texts.index("a2")
    assert texts[0] == "b1"  # thread B was not held up by thread A's retry


async def test_entries_left_pending_by_a_dead_consumer_are_reclaimed(
    aredis: aioredis.Redis,
) -> None:
    await aredis.xgroup_create(KEYS.outbox, "gateway", id="0", mkstream=True)
    await put(aredis, message("orphan", "k-orphan"))
    await aredis.xreadgroup("gateway", "dead-gateway", {KEYS.outbox: ">"}, count=10)
    channel = MemoryChannel()

    async def idle_long_enough() -> bool:  # for reclaim_idle_seconds=1
        idle = await aredis.xpending_range(KEYS.outbox, "gateway", "-", "+", 1, idle=1000)
        return bool(idle)

    await until(idle_long_enough, timeout=5)
    await run_egress(aredis, channel, lambda e: channel.sent, reclaim_idle_seconds=1)
    assert [m.text for m in channel.sent] == ["orphan"]


async def test_trim_drops_only_acknowledged_entries_past_the_keep_window(
    aredis: aioredis.Redis,
) -> None:
    await put(aredis, *(message(f"m{i}", f"k-trim-{i}") for i in range(5)))
    channel = MemoryChannel()
    egress = await run_egress(aredis, channel, lambda e: len(channel.sent) == 5)
    # One more entry, read by a gateway that died before acknowledging it.
    await put(aredis, message("unacked", "k-trim-unacked"))
    await aredis.xreadgroup("gateway", "dead", {KEYS.outbox: ">"}, count=10)
    await put(aredis, message("after", "k-trim-after"))

    assert await egress.trim() == 0  # all younger than the keep window
    assert await egress.trim(keep_seconds=0) == 5  # the five delivered ones go
    left = [json.loads(f["data"])["text"] for _, f in await aredis.xrange(KEYS.outbox)]
    assert left == ["unacked", "after"]  # never past an unacknowledged entry


async def test_an_idle_thread_lane_goes_away_and_comes_back(
    aredis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.gateway.egress.LANE_IDLE_SECONDS", 0.2)
    channel = MemoryChannel()
    await put(aredis, message("one", "k-idle-1", thread="a"), message("two", "k-idle-2", "b"))

    async def lanes_gone(egress: Egress) -> bool:
        return len(channel.sent) == 2 and not egress._lane_tasks

    egress = await run_egress(aredis, channel, lanes_gone)
    assert not egress._lane_tasks and not egress._lanes
    await put(aredis, message("three", "k-idle-3", thread="a"))
    await run_egress(aredis, channel, lambda e: len(channel.sent) == 3)
    first, last = channel.sent[:2], channel.sent[2]
    assert sorted(m.text for m in first) == ["one", "two"]  # two lanes: either order
    assert last.text == "three"  # a new lane for thread "a" after the old one went away
