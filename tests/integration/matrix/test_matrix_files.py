"""Matrix files in and out against a real Synapse (authenticated media, nio on both sides)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nio import MemoryDownloadResponse, RoomSendResponse, UploadResponse

from adapters.matrix import MatrixChannel
from bot.config import AttachmentSettings
from bot.ports import FileChannel, OutFile
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import ThreadRef
from tests.matrix_support import Collector, Human, matrix_settings

LIMITS = AttachmentSettings(max_bytes=2_000, max_files=2)


async def start_bot(
    synapse: Synapse, bot: MatrixUser, store: Path, adapters: list[MatrixChannel], allow: str
) -> tuple[MatrixChannel, Collector]:
    settings = matrix_settings(synapse, bot, allow=[allow])
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
