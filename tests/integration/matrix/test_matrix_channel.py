"""The Matrix adapter against a real Synapse, with a nio-driven human on the other side."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from adapters.matrix import MatrixChannel
from adapters.matrix.login import Client, ClientClosed
from bot.errors import DeliveryError
from bot.testing import until
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import Outbound, OutboundKind, ThreadRef
from tests.matrix_support import Collector, Human, matrix_settings


async def start_bot(
    synapse: Synapse,
    bot: MatrixUser,
    store: Path,
    adapters: list[MatrixChannel],
    *,
    allow: list[str],
    **overrides: object,
) -> tuple[MatrixChannel, Collector]:
    settings = matrix_settings(synapse, bot, allow=allow, **overrides)
    adapter = MatrixChannel(settings=settings, store_path=store)
    sink = Collector()
    await adapter.start(sink)
    adapters.append(adapter)
    return adapter, sink


def thread(bot: MatrixUser, room: str, root: str | None) -> ThreadRef:
    return ThreadRef(platform="matrix", account=bot.user_id, chat=room, thread=root)


async def test_two_threads_in_one_room_get_their_own_replies(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human, colleague = make_human("alice"), make_human("amy")
    adapter, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, allow=[human.user.user_id]
    )
    # Three members: a group room (two members would make it a DM).
    room = await human.create_room(invite=[bot_user.user_id, colleague.user.user_id])
    await colleague.join(room)
    await human.wait_joined(room, bot_user.user_id)

    root_a = await human.send(room, "first question", mention=bot_user.user_id)
    root_b = await human.send(room, f"{bot_user.user_id}: second question")
    in_a = await human.send(room, "more on A", thread=root_a)
    in_b = await human.send(room, "more on B", thread=root_b)

    got = {i.message_id: i for i in [await sink.wait_for(lambda i: i.message_id == in_b)]}
    got.update({i.message_id: i for i in sink.human()})
    assert got[root_a].thread == thread(bot_user, room, root_a)
    assert got[root_a].mentioned and not got[root_a].is_dm
    assert got[root_b].thread == thread(bot_user, room, root_b)
    assert got[root_b].text == "second question"
    assert got[in_a].thread == thread(bot_user, room, root_a)
    assert got[in_b].thread == thread(bot_user, room, root_b)
    assert not got[in_a].mentioned
    assert got[in_a].sender.user_id == human.user.user_id

    (reply_a,) = await adapter.send(Outbound(thread=thread(bot_user, room, root_a), text="**A**"))
    (reply_b,) = await adapter.send(
        Outbound(thread=thread(bot_user, room, root_b), text="B", kind=OutboundKind.ANNOUNCE)
    )
    in_thread_a = await human.thread_event_ids(room, root_a)
    in_thread_b = await human.thread_event_ids(room, root_b)
    assert {in_a, reply_a} <= in_thread_a and reply_b not in in_thread_a
    assert {in_b, reply_b} <= in_thread_b and reply_a not in in_thread_b

    event = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{reply_a}")
    relates = event["content"]["m.relates_to"]
    assert relates["is_falling_back"] is True
    assert relates["m.in_reply_to"]["event_id"] == in_a
    assert event["content"]["formatted_body"] == "<p><strong>A</strong></p>"
    echo = await sink.wait_for(lambda i: i.message_id == reply_a)
    assert echo.sender.is_self


async def test_restart_keeps_device_and_replays_nothing(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("bob")
    store = tmp_path / "bot"
    first, sink1 = await start_bot(synapse, bot_user, store, adapters, allow=[human.user.user_id])
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)
    before = await human.send(room, "before restart", mention=bot_user.user_id)
    await sink1.wait_for(lambda i: i.message_id == before)
    device = first.device_id
    await first.stop()

    while_down = await human.send(room, "while down", mention=bot_user.user_id)
    second, sink2 = await start_bot(synapse, bot_user, store, adapters, allow=[human.user.user_id])
    assert second.device_id == device
    after = await human.send(room, "after restart", mention=bot_user.user_id)
    await sink2.wait_for(lambda i: i.message_id == after)
    assert [i.message_id for i in sink2.human()] == [while_down, after]

    bot_devices = await _devices_of(synapse, bot_user)
    assert bot_devices == {device}


async def _devices_of(synapse: Synapse, user: MatrixUser) -> set[str]:
    data = await asyncio.to_thread(
        synapse.api, "GET", "/_matrix/client/v3/devices", token=user.access_token
    )
    # The registration created one device; the bot logs in once more and then reuses it.
    return {d["device_id"] for d in data["devices"]} - {user.device_id}


async def test_first_start_skips_history(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("carol")
    room = await human.create_room(invite=[bot_user.user_id])
    await asyncio.to_thread(
        synapse.api, "POST", f"/_matrix/client/v3/join/{room}", {}, token=bot_user.access_token
    )
    old = await human.send(room, "history", mention=bot_user.user_id)
    _, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, allow=[human.user.user_id]
    )
    new = await human.send(room, "fresh", mention=bot_user.user_id)
    await sink.wait_for(lambda i: i.message_id == new)
    assert old not in [i.message_id for i in sink.items]


async def test_invites_only_from_allowlisted_users(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    friend, stranger = make_human("friend"), make_human("stranger")
    await start_bot(synapse, bot_user, tmp_path / "bot", adapters, allow=[friend.user.user_id])
    caplog.set_level(logging.WARNING, logger="adapters.matrix")
    strange_room = await stranger.create_room(invite=[bot_user.user_id])
    friendly_room = await friend.create_room(invite=[bot_user.user_id])
    await friend.wait_joined(friendly_room, bot_user.user_id)
    members = await stranger.api("GET", f"/_matrix/client/v3/rooms/{strange_room}/members")
    membership = {e["state_key"]: e["content"]["membership"] for e in members["chunk"]}
    assert membership[bot_user.user_id] == "invite"
    assert f"ignoring invite to {strange_room}" in caplog.text


async def test_dm_unmentioned_and_bang_commands(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human, other = make_human("dave"), make_human("erin")
    allow = [human.user.user_id, other.user.user_id]
    _, sink = await start_bot(synapse, bot_user, tmp_path / "bot", adapters, allow=allow)
    group = await human.create_room(invite=[bot_user.user_id, other.user.user_id])
    dm = await other.create_room(invite=[bot_user.user_id], direct=True)
    await human.wait_joined(group, bot_user.user_id)
    await other.wait_joined(dm, bot_user.user_id)

    chatter = await human.send(group, "just chatting")
    command = await human.send(group, "!subagents list")
    direct = await other.send(dm, "hello there")
    got = await sink.wait_for(lambda i: i.message_id == direct)
    assert got.is_dm and not got.mentioned
    assert got.thread == thread(bot_user, dm, None)
    by_id = {i.message_id: i for i in sink.items}
    assert not by_id[chatter].mentioned and by_id[chatter].thread.thread is None
    assert not by_id[chatter].is_dm
    assert by_id[command].text == "/subagents list"
    assert by_id[command].mentioned and by_id[command].thread.thread is None


async def test_rate_limit_becomes_retry_after(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("frank")
    adapter, _ = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, allow=[human.user.user_id]
    )
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)
    admin = await asyncio.to_thread(synapse.register, f"admin-{uuid.uuid4().hex[:8]}", admin=True)
    override = f"/_synapse/admin/v1/users/{bot_user.user_id}/override_ratelimit"
    limits = {"messages_per_second": 1, "burst_count": 1}
    await asyncio.to_thread(synapse.api, "POST", override, limits, token=admin.access_token)

    failed = ""
    with pytest.raises(DeliveryError) as caught:
        for n in range(10):
            failed = f"message {n}"
            await adapter.send(Outbound(thread=thread(bot_user, room, None), text=failed))
    assert caught.value.retry_after is not None and caught.value.retry_after > 0
    assert not caught.value.permanent
    # The outbox retries after retry_after: the message then goes through.
    await asyncio.sleep(caught.value.retry_after)
    (event_id,) = await adapter.send(Outbound(thread=thread(bot_user, room, None), text=failed))
    event = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{event_id}")
    assert event["content"]["body"] == failed


async def test_status_edits_and_long_replies_stay_in_the_thread(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("heidi")
    adapter, _ = await start_bot(
        synapse,
        bot_user,
        tmp_path / "bot",
        adapters,
        allow=[human.user.user_id],
        max_message_chars=200,
    )
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)
    root = await human.send(room, "go", mention=bot_user.user_id)
    where = thread(bot_user, room, root)
    (status,) = await adapter.send(
        Outbound(thread=where, text="⏳ 1 tool call", kind=OutboundKind.STATUS)
    )
    assert await adapter.send(Outbound(thread=where, text="✅ done", edit_of=status)) == [status]

    path = f"/_matrix/client/v1/rooms/{room}/relations/{status}/m.replace"
    edits = (await human.api("GET", path))["chunk"]
    assert [e["content"]["m.new_content"]["body"] for e in edits] == ["✅ done"]
    assert edits[0]["content"]["body"] == "* ✅ done"
    original = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{status}")
    assert original["content"]["msgtype"] == "m.notice"
    assert status in await human.thread_event_ids(room, root)

    # A run that ends quietly: its status card is redacted.
    await adapter.delete(where, status)
    redacted = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{status}")
    assert redacted["content"] == {} and "redacted_because" in redacted["unsigned"]

    long_text = "\n\n".join(f"paragraph {n} " + "word " * 30 for n in range(3))
    parts = await adapter.send(Outbound(thread=where, text=long_text))
    assert len(parts) >= 2
    assert set(parts) <= await human.thread_event_ids(room, root)


async def test_encrypted_room_round_trip(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    human = make_human("ivan")
    adapter, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, allow=[human.user.user_id], encryption=True
    )
    room = await human.create_room(invite=[bot_user.user_id], encrypted=True)
    await human.wait_joined(room, bot_user.user_id)

    root = await human.send(room, "secret question", mention=bot_user.user_id)
    inside = await human.send(room, "secret detail", thread=root)
    got = await sink.wait_for(lambda i: i.message_id == inside)
    assert got.text == "secret detail"
    assert got.thread == thread(bot_user, room, root)

    where = thread(bot_user, room, root)
    (reply,) = await adapter.send(Outbound(thread=where, text="secret **answer**"))
    raw = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{reply}")
    assert raw["type"] == "m.room.encrypted"
    assert raw["content"]["m.relates_to"]["event_id"] == root
    assert reply in await human.thread_event_ids(room, root)
    decrypted = await human.wait_event(reply)
    assert decrypted.body == "secret **answer**"
    assert decrypted.source["content"]["m.relates_to"]["rel_type"] == "m.thread"

    # After a restart the same device reads the room with the keys from its store.
    await adapter.stop()
    adapter, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, allow=[human.user.user_id], encryption=True
    )
    later = await human.send(room, "still secret", thread=root)
    assert (await sink.wait_for(lambda i: i.message_id == later)).text == "still secret"

    # A message whose room key the bot never got: a clear warning, not silence.
    caplog.set_level(logging.WARNING, logger="adapters.matrix")
    for device in human.client.device_store.active_user_devices(bot_user.user_id):
        human.client.blacklist_device(device)
    hidden = await human.send(room, "not for the bot", thread=root)
    await until(lambda: f"cannot decrypt event {hidden}" in caplog.text, timeout=15)
    assert hidden not in [i.message_id for i in sink.items]


async def test_access_token_login_uses_the_tokens_device(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("kim")
    settings = matrix_settings(synapse, bot_user, allow=[human.user.user_id]).model_copy(
        update={"password": None, "access_token": SecretStr(bot_user.access_token)}
    )
    adapter = MatrixChannel(settings=settings, store_path=tmp_path / "bot")
    sink = Collector()
    await adapter.start(sink)
    adapters.append(adapter)
    assert adapter.device_id == bot_user.device_id
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)
    sent = await human.send(room, "hi", mention=bot_user.user_id)
    assert (await sink.wait_for(lambda i: i.message_id == sent)).text == "hi"
    saved = (tmp_path / "bot" / "session.json").read_text()
    assert bot_user.access_token not in saved  # a configured token is never written


async def test_a_resend_after_a_restart_posts_once(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    """A gateway that died mid-send re-sends the entry: the homeserver de-duplicates it.

    The outbox key is the transaction id and a restart keeps the device, so the same
    ``PUT …/send/m.room.message/{txnId}`` returns the first event instead of a second one.
    """
    human = make_human("carol")
    store = tmp_path / "bot"
    first, _ = await start_bot(synapse, bot_user, store, adapters, allow=[human.user.user_id])
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)
    root = await human.send(room, "question", mention=bot_user.user_id)
    message = Outbound(
        thread=thread(bot_user, room, root),
        text="the announce",
        kind=OutboundKind.ANNOUNCE,
        idempotency_key=f"announce:{uuid.uuid4().hex}",
    )
    sent_first = await first.send(message)
    await first.stop()

    second, _ = await start_bot(synapse, bot_user, store, adapters, allow=[human.user.user_id])
    sent_again = await second.send(message)
    assert sent_again == sent_first
    texts = [e["content"].get("body") for e in await human.thread_events(room, root)]
    assert texts.count("the announce") == 1


async def test_a_request_after_close_fails_at_once_and_opens_no_session() -> None:
    """nio opens a new HTTP session for a request made without one; after the adapter's
    close a late request (a send still retrying) must fail instead of leaking one."""
    client = Client("http://127.0.0.1:9", "@bot:localhost")
    await client.close()
    with pytest.raises(ClientClosed):
        await client.login("password")
    assert client.client_session is None
