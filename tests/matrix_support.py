"""Matrix test support shared by the integration and end-to-end tests.

One Synapse serves the whole pytest session, whichever test directories ask for it: the
first request starts it and keeps it in the config stash; it stops when pytest ends.
The "human" is a second Matrix account driven with matrix-nio, with its own encryption
store, so encrypted rooms are exercised end to end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nio import (
    AsyncClient,
    AsyncClientConfig,
    RoomCreateResponse,
    RoomMessageText,
    RoomSendResponse,
    SyncResponse,
)
from pydantic import SecretStr

from bot.config import MatrixSettings
from bot.testing import until
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import Inbound

WAIT = 15.0
_SYNAPSE = pytest.StashKey[Synapse]()


def shared_synapse(request: pytest.FixtureRequest) -> Synapse:
    """The session's Synapse, started on first use."""
    config = request.config
    server = config.stash.get(_SYNAPSE, None)
    if server is None:
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        server = Synapse(data_dir=factory.mktemp("synapse")).start()
        config.stash[_SYNAPSE] = server
        config.add_cleanup(server.stop)
    return server


class Collector:
    """An InboundSink that keeps what it got and lets a test wait for a match."""

    def __init__(self) -> None:
        self.items: list[Inbound] = []
        self._changed = asyncio.Condition()

    async def __call__(self, inbound: Inbound) -> None:
        async with self._changed:
            self.items.append(inbound)
            self._changed.notify_all()

    async def wait_for(self, pred: Callable[[Inbound], bool], timeout: float = WAIT) -> Inbound:
        async def find() -> Inbound:
            async with self._changed:
                while True:
                    for item in self.items:
                        if pred(item):
                            return item
                    await self._changed.wait()

        return await asyncio.wait_for(find(), timeout)

    def human(self) -> list[Inbound]:
        return [item for item in self.items if not item.sender.is_self]


class Human:
    """A person's Matrix client (nio, encryption on, own store)."""

    def __init__(self, *, synapse: Synapse, user: MatrixUser, store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        self.user = user
        self.synapse = synapse
        config = AsyncClientConfig(encryption_enabled=True, store_sync_tokens=True)
        self.client = AsyncClient(synapse.url, user.user_id, store_path=str(store), config=config)
        self.client.restore_login(user.user_id, user.device_id, user.access_token)
        self.timeline: list[Any] = []

    async def sync(self, timeout: int = 0) -> None:
        """One sync; every timeline event it brings is kept in ``self.timeline``."""
        response = await self.client.sync(timeout=timeout, full_state=not self.client.next_batch)
        assert isinstance(response, SyncResponse), response
        for info in response.rooms.join.values():
            self.timeline.extend(info.timeline.events)
        if self.client.should_upload_keys:
            await self.client.keys_upload()
        if self.client.should_query_keys:
            await self.client.keys_query()
        await self.client.send_to_device_messages()

    async def create_room(
        self, *, invite: list[str], encrypted: bool = False, direct: bool = False
    ) -> str:
        state: list[dict[str, Any]] = []
        if encrypted:
            state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        response = await self.client.room_create(
            invite=invite, initial_state=state, is_direct=direct
        )
        assert isinstance(response, RoomCreateResponse), response
        await self.sync()
        return str(response.room_id)

    async def join(self, room_id: str) -> None:
        await self.api("POST", f"/_matrix/client/v3/join/{room_id}", {})

    async def send(
        self, room_id: str, body: str, *, thread: str | None = None, mention: str | None = None
    ) -> str:
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if mention:
            content["m.mentions"] = {"user_ids": [mention]}
        if thread:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        await self.sync()
        response = await self.client.room_send(
            room_id, "m.room.message", content, ignore_unverified_devices=True
        )
        assert isinstance(response, RoomSendResponse), response
        return str(response.event_id)

    async def wait_event(self, event_id: str, timeout: float = WAIT) -> RoomMessageText:
        """Sync until the (decrypted) text message ``event_id`` arrives."""
        return await self.wait_message(lambda event: event.event_id == event_id, timeout)

    async def wait_message(
        self, pred: Callable[[RoomMessageText], bool], timeout: float = WAIT
    ) -> RoomMessageText:
        """Sync until a (decrypted) text message matching ``pred`` has arrived."""

        async def poll() -> RoomMessageText:
            while True:
                for event in self.timeline:
                    if isinstance(event, RoomMessageText) and pred(event):
                        return event
                await self.sync(timeout=1000)

        return await asyncio.wait_for(poll(), timeout)

    async def api(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {self.user.access_token}"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.synapse.url + path, json=body, headers=headers) as resp,
        ):
            return await resp.json()

    async def wait_joined(self, room_id: str, user_id: str, timeout: float = WAIT) -> None:
        async def joined() -> bool:
            data = await self.api("GET", f"/_matrix/client/v3/rooms/{room_id}/joined_members")
            return user_id in data.get("joined", {})

        await until(joined, timeout=timeout, every=0.1)

    async def thread_events(self, room_id: str, root: str) -> list[dict[str, Any]]:
        """The thread's events as the server's ``/relations`` API lists them."""
        path = f"/_matrix/client/v1/rooms/{room_id}/relations/{root}/m.thread?limit=100"
        data = await self.api("GET", path)
        events: list[dict[str, Any]] = data["chunk"]
        return events

    async def thread_event_ids(self, room_id: str, root: str) -> set[str]:
        return {event["event_id"] for event in await self.thread_events(room_id, root)}


def matrix_settings(
    synapse: Synapse, bot: MatrixUser, *, allow: list[str], **overrides: Any
) -> MatrixSettings:
    return MatrixSettings(
        homeserver=synapse.url,
        user_id=bot.user_id,
        password=SecretStr(bot.password),
        allow_users=allow,
        sync_timeout_ms=5_000,
        **overrides,
    )


# Fixtures: conftest modules import these names to make them available.


@pytest.fixture
def synapse(request: pytest.FixtureRequest) -> Synapse:
    return shared_synapse(request)


@pytest.fixture
def register(synapse: Synapse) -> Callable[[str], MatrixUser]:
    def make(name: str) -> MatrixUser:
        return synapse.register(f"{name}-{uuid.uuid4().hex[:8]}")

    return make


@pytest.fixture
async def make_human(
    synapse: Synapse, register: Callable[[str], MatrixUser], tmp_path: Path
) -> AsyncIterator[Callable[[str], Human]]:
    humans: list[Human] = []

    def make(name: str) -> Human:
        human = Human(synapse=synapse, user=register(name), store=tmp_path / f"human-{name}")
        humans.append(human)
        return human

    yield make
    for human in humans:
        await human.client.close()
    # A closed transport releases its socket in a callback on the next loop iteration; the
    # test's loop closes right after this fixture, so without a pass the socket is only
    # found by the garbage collector later ("unclosed transport" in some other test).
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@pytest.fixture
def bot_user(register: Callable[[str], MatrixUser]) -> MatrixUser:
    return register("fanbot")
