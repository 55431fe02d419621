"""Telegram files in and out: real PTB (getFile, file URL, sendDocument) against the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.telegram.channel import TelegramChannel
from adapters.telegram.convert import thread_of
from bot.config import AttachmentSettings
from bot.ports import FileChannel, OutFile
from bot.testing.fake_telegram import FakeTelegram, forum, private, user
from tests.integration.telegram_support import Sink, channel_for, tg

__all__ = ["tg"]  # fixture

LIMITS = AttachmentSettings(max_bytes=2_000, max_files=2)
FORUM = forum()
TOPIC = 31
ANN = user(1001, "Ann", username="ann")


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[tuple[TelegramChannel, Sink]]:
    sink = Sink()
    channel = channel_for(tg, attachments=LIMITS)
    await channel.start(sink)
    yield channel, sink
    await channel.stop()


async def test_a_document_with_a_caption_is_downloaded(
    tg: FakeTelegram, bot: tuple[TelegramChannel, Sink]
) -> None:
    _, sink = bot
    doc = tg.files.document("report.txt", b"quarterly numbers")
    update = tg.message(
        chat=FORUM, text="", thread_id=TOPIC, document=doc,
        caption="@fanbot_bot summarize the attached file",
        caption_entities=[{"type": "mention", "offset": 0, "length": 11}],
    )  # fmt: skip
    del update["message"]["text"]
    tg.push(update)
    [inbound] = await sink.wait(1)
    assert inbound.text == "summarize the attached file" and inbound.mentioned
    [a] = inbound.attachments
    assert (a.name, a.content_type, a.data) == ("report.txt", "text/plain", b"quarterly numbers")
    assert [status for _, status in tg.files.downloads] == [200]


async def test_a_photo_without_caption_in_a_dm_takes_the_largest_size(
    tg: FakeTelegram, bot: tuple[TelegramChannel, Sink]
) -> None:
    _, sink = bot
    update = tg.message(chat=private(ANN), text="", photo=tg.files.photo(b"JPEG" * 100))
    del update["message"]["text"]
    tg.push(update)
    [inbound] = await sink.wait(1)
    assert inbound.text == "" and inbound.is_dm
    [a] = inbound.attachments
    assert a.content_type == "image/jpeg" and a.data == b"JPEG" * 100


async def test_oversized_and_failing_files_are_skipped_with_a_reason(
    tg: FakeTelegram, bot: tuple[TelegramChannel, Sink]
) -> None:
    _, sink = bot
    big = tg.files.document("big.bin", b"x" * 3_000)
    gone = tg.files.document("gone.txt", b"bye")
    del tg.files.hosted[gone["file_id"]]
    for doc in (big, gone):
        update = tg.message(chat=private(ANN), text="", document=doc)
        del update["message"]["text"]
        tg.push(update)
    first, second = await sink.wait(2)
    assert "larger than" in first.attachments[0].skipped
    assert "download failed" in second.attachments[0].skipped
    assert tg.calls_to("getFile") and len(tg.calls_to("getFile")) == 1  # big: never asked


async def test_send_file_posts_a_document_into_the_topic(
    tg: FakeTelegram, bot: tuple[TelegramChannel, Sink]
) -> None:
    channel, _ = bot
    assert isinstance(channel, FileChannel)
    tg.add_topic(FORUM, TOPIC)
    thread = thread_of(FORUM["id"], TOPIC, me=channel.me)
    file = OutFile(name="result.txt", content_type="text/plain", data=b"the answer")
    message_id = await channel.send_file(thread, file, key="announce:r1:file:1")
    [doc] = tg.files.documents
    assert (doc.filename, doc.data, doc.message_thread_id) == ("result.txt", b"the answer", TOPIC)
    assert message_id == str(doc.message_id)
