"""Matrix files in and out against a real Synapse (authenticated media, nio on both sides)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nio import MemoryDownloadResponse, RoomEncryptedFile, RoomSendResponse, UploadResponse
from nio.crypto.attachments import decrypt_attachment

from adapters.matrix import MatrixChannel
from bot.config import AttachmentSettings
from bot.ports import FileChannel, OutFile
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import ThreadRef
from tests.matrix_support import WAIT, Collector, Human, matrix_settings

LIMITS = AttachmentSettings(max_bytes=2_000, max_files=2)


async def start_bot(
    synapse: Synapse,
    bot: MatrixUser,
    store: Path,
    adapters: list[MatrixChannel],
    allow: str,
    **overrides: Any,
) -> tuple[MatrixChannel, Collector]:
    settings = matrix_settings(synapse, bot, allow=[allow], **overrides)
    adapter = MatrixChannel(settings=settings, store_path=store, attachments=LIMITS)
    sink = Collector()
    await adapter.start(sink)
    adapters.append(adapter)
    return adapter, sink


async def send_file(
    human: Human, room: str, name: str, data: bytes, *, caption: str = "", **info: Any
) -> str:
    uploaded, _ = await human.client.upload(
        io.BytesIO(data), content_type="text/plain", filename=name, filesize=len(data)
    )
    assert isinstance(uploaded, UploadResponse), uploaded
    url = info.pop("url", uploaded.content_uri)
    content = {
        "msgtype": "m.file", "body": caption or name, "filename": name, "url": url,
        "info": {"mimetype": "text/plain", "size": len(data), **info},
    }  # fmt: skip
    response = await human.client.room_send(room, "m.room.message", content)
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


async def test_files_in_a_dm_come_in_as_attachments_and_go_out_as_m_file(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("fay")
    adapter, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, human.user.user_id
    )
    room = await human.create_room(invite=[bot_user.user_id], direct=True)
    await human.wait_joined(room, bot_user.user_id)

    good = await send_file(human, room, "notes.txt", b"alpha beta", caption="summarize this")
    bare = await send_file(human, room, "bare.txt", b"no caption")
    big = await send_file(human, room, "big.txt", b"x" * 10, size=50_000)  # announced too big
    gone = await send_file(human, room, "gone.txt", b"?", url="mxc://localhost/doesnotexist")

    got = {i.message_id: i for i in [await sink.wait_for(lambda i: i.message_id == gone)]}
    got.update({i.message_id: i for i in sink.human()})
    assert got[good].text == "summarize this" and got[good].is_dm
    [a] = got[good].attachments
    assert (a.name, a.content_type, a.data) == ("notes.txt", "text/plain", b"alpha beta")
    assert got[bare].text == "" and got[bare].attachments[0].data == b"no caption"
    assert "larger than" in got[big].attachments[0].skipped
    assert "download failed" in got[gone].attachments[0].skipped

    assert isinstance(adapter, FileChannel)
    thread = ThreadRef(platform="matrix", account=bot_user.user_id, chat=room, thread=good)
    file = OutFile(name="result.txt", content_type="text/plain", data=b"42\n")
    event_id = await adapter.send_file(thread, file, key="announce:r1:file:1")
    again = await adapter.send_file(thread, file, key="announce:r1:file:1")  # a retry
    assert again == event_id
    [event] = [e for e in await human.thread_events(room, good) if e["event_id"] == event_id]
    content = event["content"]
    assert (content["msgtype"], content["body"]) == ("m.file", "result.txt")
    downloaded = await human.client.download(mxc=content["url"])
    assert isinstance(downloaded, MemoryDownloadResponse) and downloaded.body == b"42\n"


async def send_encrypted_file(
    human: Human, room: str, name: str, data: bytes, *, thread: str, bad_hash: bool = False
) -> str:
    """What Element does in an encrypted room: encrypted upload, keys in ``file``."""
    uploaded, keys = await human.client.upload(
        io.BytesIO(data), filename=name, filesize=len(data), encrypt=True
    )
    assert isinstance(uploaded, UploadResponse) and keys, uploaded
    if bad_hash:
        keys["hashes"] = {"sha256": "A" * 43}
    content = {
        "msgtype": "m.file", "body": name, "filename": name,
        "file": {**keys, "url": uploaded.content_uri},
        "info": {"mimetype": "text/plain", "size": len(data)},
        "m.relates_to": {"rel_type": "m.thread", "event_id": thread},
    }  # fmt: skip
    await human.sync()
    response = await human.client.room_send(
        room, "m.room.message", content, ignore_unverified_devices=True
    )
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


async def wait_encrypted_file(human: Human, event_id: str) -> RoomEncryptedFile:
    """Sync until the human's client has decrypted the ``m.file`` event ``event_id``."""

    async def poll() -> RoomEncryptedFile:
        while True:
            for event in human.timeline:
                if isinstance(event, RoomEncryptedFile) and event.event_id == event_id:
                    return event
            await human.sync(timeout=1000)

    return await asyncio.wait_for(poll(), WAIT)


async def test_files_in_an_encrypted_room_are_decrypted_in_and_encrypted_out(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("eve")
    adapter, sink = await start_bot(
        synapse, bot_user, tmp_path / "bot", adapters, human.user.user_id, encryption=True
    )
    room = await human.create_room(invite=[bot_user.user_id], encrypted=True)
    await human.wait_joined(room, bot_user.user_id)
    root = await human.send(room, "files follow", mention=bot_user.user_id)

    sealed = await send_encrypted_file(human, room, "secret.txt", b"top secret", thread=root)
    broken = await send_encrypted_file(
        human, room, "bad.txt", b"tampered", thread=root, bad_hash=True
    )
    raw = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{sealed}")
    assert raw["type"] == "m.room.encrypted"

    got = await sink.wait_for(lambda i: i.message_id == sealed)
    [a] = got.attachments
    assert (a.name, a.content_type, a.data, a.skipped) == (
        "secret.txt", "text/plain", b"top secret", ""
    )  # fmt: skip
    assert got.thread.thread == root
    bad = await sink.wait_for(lambda i: i.message_id == broken)
    assert bad.attachments[0].data == b""
    assert "could not decrypt" in bad.attachments[0].skipped

    thread = ThreadRef(platform="matrix", account=bot_user.user_id, chat=room, thread=root)
    file = OutFile(name="result.txt", content_type="text/plain", data=b"the answer: 42\n")
    event_id = await adapter.send_file(thread, file, key="announce:r2:file:1")
    raw = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{event_id}")
    assert raw["type"] == "m.room.encrypted"
    assert event_id in await human.thread_event_ids(room, root)

    event = await wait_encrypted_file(human, event_id)
    assert "url" not in event.source["content"] and event.body == "result.txt"
    downloaded = await human.client.download(mxc=event.url)
    assert isinstance(downloaded, MemoryDownloadResponse)
    assert downloaded.body != file.data  # the server holds ciphertext only
    plain = decrypt_attachment(downloaded.body, event.key["k"], event.hashes["sha256"], event.iv)
    assert plain == file.data
