"""``FakeMatrix`` speaks the client-server API the way nio expects: logins, sync batches and
their tokens, a sync that waits for the next batch, idempotent sends, tokens checked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from nio import AsyncClient, LoginError, LoginResponse, RoomSendResponse, SyncResponse

from bot.testing.fake_matrix import FakeMatrix
from bot.testing.wait import until

BOT = "@fanbot:example.org"
ROOM = "!room:example.org"


def message(event_id: str, body: str) -> dict[str, object]:
    return {
        "type": "m.room.message",
        "event_id": event_id,
        "sender": "@alice:example.org",
        "origin_server_ts": 1,
        "content": {"msgtype": "m.text", "body": body},
    }


@pytest.fixture
async def hs() -> AsyncIterator[FakeMatrix]:
    async with FakeMatrix(user_id=BOT, password="pw") as server:
        server.add_room(ROOM, members=["@alice:example.org"])
        yield server


@pytest.fixture
async def client(hs: FakeMatrix) -> AsyncIterator[AsyncClient]:
    nio = AsyncClient(hs.url, BOT)
    yield nio
    await nio.close()


async def test_a_password_login_needs_the_password(hs: FakeMatrix, client: AsyncClient) -> None:
    assert isinstance(await client.login("wrong"), LoginError)
    done = await client.login("pw", device_name="fanbot")
    assert isinstance(done, LoginResponse)
    assert (done.user_id, done.access_token) == (BOT, hs.access_token)


async def test_a_request_without_the_token_is_refused(hs: FakeMatrix) -> None:
    url = f"{hs.url}/_matrix/client/v3/joined_rooms"
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as response:
            assert response.status == 401
            assert (await response.json())["errcode"] == "M_MISSING_TOKEN"
        async with http.get(url, headers={"Authorization": "Bearer nope"}) as response:
            assert (await response.json())["errcode"] == "M_UNKNOWN_TOKEN"
        auth = {"Authorization": f"Bearer {hs.access_token}"}
        async with http.get(url, headers=auth) as response:
            assert (await response.json()) == {"joined_rooms": [ROOM]}


async def test_sync_serves_the_queued_batches_in_order(hs: FakeMatrix, client: AsyncClient) -> None:
    await client.login("pw")
    first = await client.sync(timeout=0)
    assert isinstance(first, SyncResponse)
    assert first.rooms.join[ROOM].timeline.events == []  # a first sync: state, no history
    assert client.rooms[ROOM].member_count == 2
    hs.deliver(ROOM, [message("$one", "one")])
    hs.deliver(ROOM, [message("$one", "one"), message("$two", "two")])
    second = await client.sync(timeout=0, since=first.next_batch)
    third = await client.sync(timeout=0, since=second.next_batch)
    assert isinstance(second, SyncResponse) and isinstance(third, SyncResponse)
    assert [e.event_id for e in second.rooms.join[ROOM].timeline.events] == ["$one"]
    assert [e.event_id for e in third.rooms.join[ROOM].timeline.events] == ["$one", "$two"]
    assert hs.syncs == [None, first.next_batch, second.next_batch]
    assert hs.synced_to == 1  # it has not asked past the second batch yet


async def test_a_waiting_sync_returns_with_the_next_batch(
    hs: FakeMatrix, client: AsyncClient
) -> None:
    await client.login("pw")
    first = await client.sync(timeout=0)
    assert isinstance(first, SyncResponse)
    waiting = asyncio.create_task(client.sync(timeout=20_000, since=first.next_batch))
    await until(lambda: len(hs.syncs) == 2)  # the sync is in, waiting: nothing queued yet
    assert not waiting.done()
    hs.deliver(ROOM, [message("$late", "late")])
    got = await asyncio.wait_for(waiting, 10)
    assert isinstance(got, SyncResponse)
    assert [e.event_id for e in got.rooms.join[ROOM].timeline.events] == ["$late"]


async def test_a_send_is_recorded_once_per_transaction(hs: FakeMatrix, client: AsyncClient) -> None:
    await client.login("pw")
    await client.sync(timeout=0)
    content = {"msgtype": "m.text", "body": "hi"}
    sent = [await client.room_send(ROOM, "m.room.message", content, tx_id="t1") for _ in range(2)]
    assert all(isinstance(s, RoomSendResponse) for s in sent)
    assert sent[0].event_id == sent[1].event_id
    assert [(s.type, s.content) for s in hs.sent_to(ROOM)] == [("m.room.message", content)]
    assert not isinstance(
        await client.room_send("!other:x", "m.room.message", content), RoomSendResponse
    )
