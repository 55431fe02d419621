"""A thread's lane against real Redis: back-to-back sends in order, one round trip before a
send, the stream recreated under a running egress, and status cards after announces."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import redis.asyncio as aioredis

from bot.config import GatewaySettings, Settings
from bot.deps import Deps
from bot.errors import DeliveryError
from bot.gateway.delivery import Policy
from bot.gateway.egress import Egress
from bot.gateway.runtime import Gateway
from bot.gateway.sender import Deliverer
from bot.gateway.status_cards import ProgressRenderer
from bot.keys import Keys
from bot.ports import PartLog
from bot.store.outbox import GROUP, Outbox
from bot.store.progress import ProgressEvent
from bot.testing import MemoryChannel, until
from bot.types import Outbound, OutboundKind, ThreadRef
from tests.integration.test_egress import aredis, message

KEYS = Keys()
THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")


__all__ = ["aredis"]  # fixture


async def put(client: aioredis.Redis, *messages: Outbound) -> list[str]:
    return [await client.xadd(KEYS.outbox, {"data": json.dumps(m.to_json())}) for m in messages]


def egress_for(client: aioredis.Redis, channel: MemoryChannel, **settings: object) -> Egress:
    gateway = GatewaySettings(delivery_backoff_seconds=0.05, **settings)  # type: ignore[arg-type]
    return Egress(
        sender=Deliverer(
            outbox=Outbox(redis=client, keys=KEYS),
            adapters={"console": channel},
            policy=Policy.of(gateway),
            consumer="gw-lane",
        ),
        settings=gateway,
    )


async def running(egress: Egress, done: object) -> None:
    """Run ``egress`` until ``done()`` holds and everything written is acknowledged."""
    task = asyncio.create_task(egress.run())
    try:
        await until(done, timeout=10)  # type: ignore[arg-type]
        await until(egress.drained, timeout=10)
    finally:
        task.cancel()
        await egress.close()


class HeldRecords(Outbox):
    """An outbox whose delivered records wait until the test lets them through."""

    def __init__(self, *, redis: aioredis.Redis, keys: Keys) -> None:
        super().__init__(redis=redis, keys=keys)
        self.go = asyncio.Event()

    async def mark_delivered(self, entry_id: str, key: str, ids: list[str], *, holder: str) -> None:
        await self.go.wait()
        await super().mark_delivered(entry_id, key, ids, holder=holder)


async def test_the_next_entries_are_readied_during_a_post_and_posted_once_it_is_recorded(
    aredis: aioredis.Redis,
) -> None:
    """While "a" is posted (and its record held back), "b" and "c" are observed and locked
    already; neither posts before "a" is recorded delivered, so a crash meanwhile leaves
    at most "a" in doubt."""
    channel = MemoryChannel()
    egress = egress_for(aredis, channel)
    held = HeldRecords(redis=aredis, keys=KEYS)
    egress.outbox = egress.sender.outbox = held
    await put(aredis, message("a", "k-a"), message("b", "k-b"), message("c", "k-c"))
    task = asyncio.create_task(egress.run())
    try:

        async def readied() -> bool:
            locks = [await aredis.get(KEYS.sending(k)) for k in ("k-a", "k-b", "k-c")]
            return locks == ["gw-lane"] * 3 and len(channel.sent) == 1

        await until(readied, timeout=10)
        await asyncio.sleep(0.1)
        assert [m.text for m in channel.sent] == ["a"]
        held.go.set()
        await until(lambda: len(channel.sent) == 3, timeout=10)
        await until(egress.drained, timeout=10)
    finally:
        task.cancel()
        await egress.close()
    assert [m.text for m in channel.sent] == ["a", "b", "c"]
    for key in ("k-a", "k-b", "k-c"):
        assert await aredis.exists(KEYS.delivered(key))
        assert not await aredis.exists(KEYS.sending(key))  # the record dropped the lock


class Flaky(MemoryChannel):
    """Refuses the first tries of chosen texts (a 429 with a short Retry-After)."""

    def __init__(self, refusals: dict[str, int]) -> None:
        super().__init__()
        self.refusals = dict(refusals)
        self.posting: set[str] = set()
        self.overlapped = False

    async def send(self, m: Outbound, *, parts: PartLog | None = None) -> list[str]:
        self.overlapped |= bool(self.posting)
        self.posting.add(m.text)
        try:
            await asyncio.sleep(0.005)
            if self.refusals.get(m.text, 0) > 0:
                self.refusals[m.text] -= 1
                raise DeliveryError("429", retry_after=0.05)
            return await super().send(m, parts=parts)
        finally:
            self.posting.discard(m.text)


async def test_retries_in_one_thread_hold_its_later_messages_back_and_post_each_once(
    aredis: aioredis.Redis,
) -> None:
    texts = [f"m{i:02d}" for i in range(20)]
    channel = Flaky({"m00": 2, "m07": 1, "m19": 1})
    await put(aredis, *(message(t, f"k-{t}") for t in texts))
    await running(egress_for(aredis, channel), lambda: len(channel.sent) == len(texts))
    assert [m.text for m in channel.sent] == texts
    assert not channel.overlapped  # one post at a time per thread, ever


async def test_observing_an_entry_takes_its_free_sending_lock_in_the_same_round_trip(
    aredis: aioredis.Redis,
) -> None:
    outbox = Outbox(redis=aredis, keys=KEYS)
    await outbox.ensure_group()
    await put(aredis, message("x", "k-x"), message("y", "k-y"), message("z", "k-z"))
    read = await outbox.read_new("me")
    x, y, z = (entry_id for entry_id, _ in read)

    fresh = await outbox.observe(x, "k-x", me="me", lock_seconds=30)
    assert (fresh.holder, fresh.holder_alive, fresh.pending, fresh.deliveries) == (
        "me",
        True,
        True,
        1,
    )
    assert await aredis.get(KEYS.sending("k-x")) == "me"

    await aredis.set(KEYS.sending("k-y"), "other")  # another gateway sends it (and is dead)
    taken = await outbox.observe(y, "k-y", me="me", lock_seconds=30)
    assert (taken.holder, taken.holder_alive) == ("other", False)
    assert await aredis.get(KEYS.sending("k-y")) == "other"  # left for BreakLock to decide

    await outbox.mark_delivered(x, "k-x", ["1"], holder="me")
    done = await outbox.observe(x, "k-x", me="me", lock_seconds=30)
    assert done.delivered and not done.pending and done.holder is None  # no lock taken
    assert await aredis.xpending(KEYS.outbox, GROUP) == {
        "pending": 2,
        "min": y,
        "max": z,
        "consumers": [{"name": "me", "pending": 2}],
    }


async def test_an_outbox_that_vanished_under_a_running_egress_is_recreated(
    aredis: aioredis.Redis,
) -> None:
    channel = MemoryChannel()
    egress = egress_for(aredis, channel)
    task = asyncio.create_task(egress.run())
    try:
        await put(aredis, message("before", "k-before"))
        await until(lambda: len(channel.sent) == 1, timeout=10)
        await until(egress.drained, timeout=10)
        await aredis.delete(KEYS.outbox)  # a flushed Redis, stream and group gone
        await put(aredis, message("after", "k-after"))
        await until(lambda: len(channel.sent) == 2, timeout=10)
    finally:
        task.cancel()
        await egress.close()
    assert [m.text for m in channel.sent] == ["before", "after"]


def card_renderer(
    client: aioredis.Redis,
    channel: MemoryChannel,
    announcing: Callable[[ThreadRef], asyncio.Event | None],
) -> ProgressRenderer:
    """A renderer of one run's card ("#1 card") whose thread is busy while ``announcing``
    gives an event to wait for."""
    return ProgressRenderer(
        redis=client,
        keys=KEYS,
        adapters={"console": channel},
        min_interval=0.0,
        card_of=lambda _run_id: ("#1 card", None),
        announcing=announcing,
    )


async def test_a_card_is_finished_after_the_announces_of_its_thread_are_out(
    aredis: aioredis.Redis,
) -> None:
    channel = MemoryChannel()
    announcing = asyncio.Event()  # egress busy with the thread until set
    renderer = card_renderer(
        aredis, channel, lambda _thread: None if announcing.is_set() else announcing
    )
    try:
        start = ProgressEvent(run_id="r1", thread=THREAD, text="started")
        await renderer._on_event(start)  # not a final edit: never waits
        await renderer._on_event(
            ProgressEvent(run_id="r1", thread=THREAD, text="success", final=True)
        )
        await asyncio.sleep(0.05)
        assert channel.edits == []  # the thread's announces first
        channel.sent.append(Outbound(thread=THREAD, text="announce", kind=OutboundKind.ANNOUNCE))
        announcing.set()
        await until(lambda: len(channel.edits) == 1, timeout=5)
    finally:
        await renderer.close()
    assert channel.edits[0].text.endswith("— success")


async def test_a_card_waits_out_announces_that_start_just_after_its_run_ended(
    aredis: aioredis.Redis,
) -> None:
    """Runs ending together: the thread is idle when the first card's final event comes,
    and the next run's announce starts a moment later; the card goes after it."""
    channel = MemoryChannel()
    busy: list[asyncio.Event] = []
    renderer = card_renderer(
        aredis, channel, lambda _thread: busy[0] if busy and not busy[0].is_set() else None
    )
    try:
        await renderer._on_event(ProgressEvent(run_id="r1", thread=THREAD, text="started"))
        final = ProgressEvent(run_id="r1", thread=THREAD, text="success", final=True)
        await renderer._on_event(final)
        busy.append(asyncio.Event())  # the next announce starts within the quiet spell
        await asyncio.sleep(0.5)
        assert channel.edits == []
        busy[0].set()
        await until(lambda: len(channel.edits) == 1, timeout=5)
    finally:
        await renderer.close()


class SlowChannel(MemoryChannel):
    """Posts take a while; a post after the adapter stopped is recorded as a fault."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False
        self.posting = asyncio.Event()
        self.after_stop: list[str] = []

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        self.posting.set()
        await asyncio.sleep(0.3)
        if self.stopped:
            self.after_stop.append(message.text)
        return await super().send(message, parts=parts)

    async def stop(self) -> None:
        self.stopped = True
        await super().stop()


async def test_the_gateway_finishes_a_post_in_flight_before_stopping_the_adapter(
    redis_url: str, aredis: aioredis.Redis
) -> None:
    """A gateway stopping mid-post lets the post end before its adapter stops (a post into
    a stopped adapter fails, or with nio opens an HTTP session nobody closes)."""
    settings = Settings(redis_url=redis_url)
    channel = SlowChannel()
    gateway = Gateway(settings=settings, adapters=[channel], deps=Deps.build(settings))
    await gateway.start()
    try:
        await put(aredis, message("in flight", "k-stop"))
        await asyncio.wait_for(channel.posting.wait(), timeout=10)
    finally:
        await gateway.stop()
    assert channel.stopped
    assert channel.after_stop == []
    assert [m.text for m in channel.sent] == ["in flight"]
