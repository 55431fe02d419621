"""Two egress instances on real Redis: a split message is never posted twice.

Gateway A stops dead in the middle of a split message (its tasks are cancelled and its
liveness key lapses, as after a SIGKILL); gateway B takes the entry over and resumes from
the parts A recorded in Redis. The process-level versions (a real ``fanbot gateway``
SIGKILLed by a failpoint against the Slack and Telegram fakes) are in
``tests/faults/test_gateway_faults.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis

from bot.config import GatewaySettings
from bot.gateway.delivery import Policy
from bot.gateway.egress import Egress
from bot.gateway.sender import Deliverer, FileLoader
from bot.keys import Keys
from bot.ports import OutFile, PartLog
from bot.store.outbox import Outbox
from bot.supervise.aio import cancel_all
from bot.testing import until
from bot.types import Outbound, ThreadRef

KEYS = Keys()
THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")
TEXT = "\n".join(f"part {i}" for i in range(6))
FAST = GatewaySettings(alive_ttl_seconds=1, reclaim_idle_seconds=1, delivery_backoff_seconds=0.05)


@dataclass
class Thread:
    """The platform side: what was posted, shared by every gateway's channel."""

    posted: list[tuple[str, int, str]] = field(default_factory=list)

    def texts(self) -> list[str]:
        return [text for _, _, text in self.posted]


class PartsChannel:
    """Splits on newlines; can stall before posting part ``stall_at`` or after posting it
    (before it is recorded: the part in doubt); ``lookback`` finds posted parts by key."""

    platform = "console"

    def __init__(
        self,
        thread: Thread,
        *,
        lookback: bool,
        stall_at: int | None = None,
        unrecorded: bool = False,
    ) -> None:
        self.thread, self.lookback = thread, lookback
        self.stall_at, self.unrecorded = stall_at, unrecorded
        self.stalled = asyncio.Event()

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        book = parts or PartLog(key=message.idempotency_key)
        texts = message.text.split("\n")
        if book.in_doubt and self.lookback:
            for key, index, _ in self.thread.posted:
                if key == book.key and index not in book.posted:
                    await book.record(index, f"{key}#{index}")
        for index in book.todo(len(texts)):
            if index == self.stall_at and not self.unrecorded:
                await self._stall()
            self.thread.posted.append((book.key, index, texts[index]))
            if index == self.stall_at:
                await self._stall()
            await book.record(index, f"{book.key}#{index}")
        return book.ids(len(texts))

    async def _stall(self) -> None:
        self.stalled.set()
        await asyncio.Event().wait()  # the gateway dies here

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        raise AssertionError("no edits expected")

    async def typing(self, thread: ThreadRef) -> None:
        return None


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


def gateway(
    client: aioredis.Redis, channel: PartsChannel, name: str, files: FileLoader | None = None
) -> Egress:
    return Egress(
        sender=Deliverer(
            outbox=Outbox(redis=client, keys=KEYS),
            adapters={"console": channel},
            policy=Policy.of(FAST),
            consumer=name,
            files=files,
        ),
        settings=FAST,
    )


async def crash(egress: Egress, task: asyncio.Task[None]) -> None:
    """Stop ``egress`` without a goodbye: its entries stay pending, its liveness key lapses."""
    await cancel_all([task, *egress._lane_tasks.values()])


@pytest.mark.parametrize(
    ("unrecorded", "lookback", "repeated"),
    [
        (False, False, []),  # died between parts: nothing in doubt, nothing repeated
        (True, True, []),  # part 2 posted, not recorded; the platform can be read (Slack)
        (True, False, ["part 2"]),  # ... and cannot (Telegram): that one part again
    ],
    ids=["between-parts", "in-doubt-lookback", "in-doubt-blind"],
)
async def test_a_second_gateway_resumes_a_split_message_where_the_first_died(
    aredis: aioredis.Redis, unrecorded: bool, lookback: bool, repeated: list[str]
) -> None:
    thread = Thread()
    entry = Outbound(thread=THREAD, text=TEXT, idempotency_key="announce:r1")
    await aredis.xadd(KEYS.outbox, {"data": json.dumps(entry.to_json())})

    first_channel = PartsChannel(thread, lookback=lookback, stall_at=2, unrecorded=unrecorded)
    first = gateway(aredis, first_channel, "gw-a")
    first_task = asyncio.create_task(first.run())
    await asyncio.wait_for(first_channel.stalled.wait(), 10)
    await crash(first, first_task)
    assert await aredis.hgetall(KEYS.parts("announce:r1")) == {
        "0": "announce:r1#0",
        "1": "announce:r1#1",
    }

    second = gateway(aredis, PartsChannel(thread, lookback=lookback), "gw-b")
    second_task = asyncio.create_task(second.run())
    try:
        await until(second.drained, timeout=15)
    finally:
        await cancel_all([second_task])
        await second.close()

    expected = [f"part {i}" for i in range(6)]
    posted = thread.texts()
    for text in repeated:
        posted.remove(text)  # the at-least-once case: exactly this part twice
    assert posted == expected
    assert json.loads(await aredis.get(KEYS.delivered("announce:r1"))) == [
        f"announce:r1#{i}" for i in range(6)
    ]


async def test_every_part_is_recorded_with_its_platform_id_and_expires(
    aredis: aioredis.Redis,
) -> None:
    thread = Thread()
    entry = Outbound(thread=THREAD, text=TEXT, idempotency_key="reply:x")
    await aredis.xadd(KEYS.outbox, {"data": json.dumps(entry.to_json())})
    egress = gateway(aredis, PartsChannel(thread, lookback=False), "gw")
    task = asyncio.create_task(egress.run())
    try:
        await until(egress.drained, timeout=10)
    finally:
        await cancel_all([task])
        await egress.close()
    parts = await aredis.hgetall(KEYS.parts("reply:x"))
    assert parts == {str(i): f"reply:x#{i}" for i in range(6)}
    ttl = await aredis.ttl(KEYS.parts("reply:x"))
    assert abs(ttl - await aredis.ttl(KEYS.delivered("reply:x"))) <= 1 and ttl > 86_400
    assert not await aredis.exists(KEYS.sending("reply:x"))  # the lock went with the send


async def test_an_entry_this_gateway_read_but_never_got_is_picked_up_without_the_reclaim_timer(
    aredis: aioredis.Redis,
) -> None:
    """A read whose reply a lost connection swallowed leaves the entry pending with this
    very gateway; it is found in seconds, not after ``reclaim_idle_seconds`` (30 s)."""
    thread = Thread()
    entry = Outbound(thread=THREAD, text="lost reply", idempotency_key="reply:lost")
    await aredis.xgroup_create(KEYS.outbox, "gateway", id="0", mkstream=True)
    await aredis.xadd(KEYS.outbox, {"data": json.dumps(entry.to_json())})
    await aredis.xreadgroup("gateway", "gw-same", {KEYS.outbox: ">"}, count=10)  # reply lost
    settings = GatewaySettings()  # reclaim_idle_seconds=30
    egress = Egress(
        sender=Deliverer(
            outbox=Outbox(redis=aredis, keys=KEYS),
            adapters={"console": PartsChannel(thread, lookback=True)},
            policy=Policy.of(settings),
            consumer="gw-same",
        ),
        settings=settings,
    )
    task = asyncio.create_task(egress.run())
    try:
        await until(egress.drained, timeout=5)
    finally:
        await cancel_all([task])
        await egress.close()
    assert thread.texts() == ["lost reply"]


class FilesChannel(PartsChannel):
    """Also posts files; can stall in the upload of file number ``stall_file``."""

    def __init__(self, thread: Thread, *, stall_file: int | None = None) -> None:
        super().__init__(thread, lookback=False)
        self.stall_file = stall_file
        self.uploads: list[str] = []

    async def send_file(self, thread: ThreadRef, file: OutFile, *, key: str) -> str:
        if len(self.uploads) == self.stall_file:
            await self._stall()
        self.uploads.append(file.name)
        self.thread.posted.append((key, -1, f"file {file.name}"))
        return f"{key}#upload"


async def test_a_takeover_never_uploads_a_posted_attachment_again(aredis: aioredis.Redis) -> None:
    thread = Thread()
    entry = Outbound(
        thread=THREAD,
        text="part 0\npart 1",
        idempotency_key="announce:f1",
        attachments=("out/a.txt", "out/b.txt"),
        workspace="agent:main:console:c:thread:t",
    )
    await aredis.xadd(KEYS.outbox, {"data": json.dumps(entry.to_json())})

    async def files(session: str, path: str) -> bytes:
        assert session == "agent:main:console:c:thread:t"
        return path.encode()

    first_channel = FilesChannel(thread, stall_file=1)  # dies uploading b.txt
    first = gateway(aredis, first_channel, "gw-a", files)
    first_task = asyncio.create_task(first.run())
    await asyncio.wait_for(first_channel.stalled.wait(), 10)
    await crash(first, first_task)
    assert first_channel.uploads == ["a.txt"]

    second_channel = FilesChannel(thread)
    second = gateway(aredis, second_channel, "gw-b", files)
    second_task = asyncio.create_task(second.run())
    try:
        await until(second.drained, timeout=15)
    finally:
        await cancel_all([second_task])
        await second.close()

    assert second_channel.uploads == ["b.txt"]  # a.txt was recorded as posted: not again
    assert thread.texts() == ["part 0", "part 1", "file a.txt", "file b.txt"]
