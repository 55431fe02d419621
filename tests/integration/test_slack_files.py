"""Slack files in and out: the real adapter (slack_sdk / bolt) against the fake Slack."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.slack import SlackChannel
from bot.config import AttachmentSettings
from bot.ports import FileChannel, OutFile
from bot.testing.fake_slack import FakeSlack
from bot.types import ThreadRef
from tests.integration.test_slack_socket import Sink

LIMITS = AttachmentSettings(max_bytes=2_000, max_files=2)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def channel(slack: FakeSlack) -> AsyncIterator[tuple[SlackChannel, Sink]]:
    sink = Sink()
    adapter = SlackChannel(settings=slack.settings(), attachments=LIMITS)
    await adapter.start(sink)
    await slack.wait_connected()
    yield adapter, sink
    await adapter.stop()


async def test_a_posted_file_is_downloaded_with_the_bot_token(
    slack: FakeSlack, channel: tuple[SlackChannel, Sink]
) -> None:
    _, sink = channel
    report = slack.files.host("report.txt", b"quarterly numbers", mimetype="text/plain")
    event = slack.app_mention(
        text="<@U0FANBOT> summarize the attached file", subtype="file_share", files=[report]
    )
    await slack.wait_ack(await slack.push_event(event))
    [inbound] = await sink.wait(1)
    assert inbound.text == "summarize the attached file"
    [attachment] = inbound.attachments
    assert (attachment.name, attachment.content_type) == ("report.txt", "text/plain")
    assert attachment.data == b"quarterly numbers" and attachment.size == 17
    assert not attachment.skipped
    assert slack.files.downloads == [(report["id"], 200)]


async def test_a_file_only_message_in_a_dm_is_still_a_message(
    slack: FakeSlack, channel: tuple[SlackChannel, Sink]
) -> None:
    _, sink = channel
    photo = slack.files.host("cat.png", b"\x89PNG...", mimetype="image/png")
    event = slack.message(text="", channel="D0DM", subtype="file_share", files=[photo])
    await slack.push_event(event)
    [inbound] = await sink.wait(1)
    assert inbound.text == "" and inbound.is_dm
    assert [a.data for a in inbound.attachments] == [b"\x89PNG..."]


async def test_oversized_failing_and_surplus_files_are_skipped_with_a_reason(
    slack: FakeSlack, channel: tuple[SlackChannel, Sink]
) -> None:
    _, sink = channel
    big = slack.files.host("big.bin", b"x" * 3_000)
    liar = slack.files.host("liar.bin", b"y" * 3_000, size=10)  # announced small, is big
    gone = slack.files.host("gone.txt", b"deleted")
    del slack.files.hosted[gone["id"]]
    extra = slack.files.host("extra.txt", b"one too many")
    files = [big, liar, gone, extra]
    await slack.push_event(slack.app_mention(text="<@U0FANBOT> look", files=files))
    [inbound] = await sink.wait(1)
    by_name = {a.name: a for a in inbound.attachments}
    assert "larger than" in by_name["big.bin"].skipped
    assert "larger than" in by_name["liar.bin"].skipped and by_name["liar.bin"].data == b""
    assert "download failed: HTTP 404" in by_name["gone.txt"].skipped
    assert "more than 2 files" in by_name["extra.txt"].skipped
    assert big["id"] not in {f for f, _ in slack.files.downloads}  # never fetched


async def test_files_of_unaddressed_top_level_messages_are_not_fetched(
    slack: FakeSlack, channel: tuple[SlackChannel, Sink]
) -> None:
    _, sink = channel
    f = slack.files.host("x.txt", b"x")
    await slack.push_event(slack.message(text="just sharing", files=[f]))
    [inbound] = await sink.wait(1)
    assert inbound.attachments == () and slack.files.downloads == []


async def test_send_file_uploads_into_the_thread(
    slack: FakeSlack, channel: tuple[SlackChannel, Sink]
) -> None:
    adapter, _ = channel
    assert isinstance(adapter, FileChannel)
    thread = ThreadRef(platform="slack", account=slack.team_id, chat="C0GENERAL", thread="100.1")
    file = OutFile(name="result.txt", content_type="text/plain", data=b"the answer")
    file_id = await adapter.send_file(thread, file, key="announce:r1:file:1")
    [up] = slack.files.uploads
    assert (up.file_id, up.filename, up.data) == (file_id, "result.txt", b"the answer")
    assert (up.channel, up.thread_ts) == ("C0GENERAL", "100.1")
    methods = [c.method for c in slack.calls]
    assert "files.getUploadURLExternal" in methods and "files.completeUploadExternal" in methods
