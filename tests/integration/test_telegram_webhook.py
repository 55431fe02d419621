"""Webhook mode: the fake Bot API POSTs updates to the channel's route on a local server."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession, web

from adapters.telegram.channel import SECRET_HEADER, TelegramChannel
from bot.testing import until
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.netutil import bind_loopback
from bot.types import Inbound
from tests.integration.telegram_support import Sink, channel_for, sink, tg

NAMES = ["subagents", "stop", "context", "new", "model", "status", "usage", "help"]
"""The commands registered with setMyCommands, in order (pinned on purpose)."""

__all__ = ["sink", "tg"]  # fixtures

SECRET = "s3cret-token_42"
FORUM = forum()


@pytest.fixture
async def listener() -> AsyncIterator[tuple[socket.socket, str]]:
    sock = bind_loopback()
    yield sock, f"http://127.0.0.1:{sock.getsockname()[1]}/tg/hook"
    sock.close()


async def _serve(channel: TelegramChannel, sock: socket.socket) -> web.AppRunner:
    app = web.Application()
    app.add_routes(channel.http_routes())  # what the gateway does with every adapter
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


@pytest.fixture
async def webhook(
    tg: FakeTelegram, sink: Sink, listener: tuple[socket.socket, str]
) -> AsyncIterator[tuple[TelegramChannel, str]]:
    sock, url = listener
    channel = channel_for(tg, webhook_url=url, webhook_secret=SECRET)
    runner = await _serve(channel, sock)
    await channel.start(sink)
    yield channel, url
    await channel.stop()
    await runner.cleanup()


async def test_start_sets_the_webhook_and_never_polls(
    tg: FakeTelegram, webhook: tuple[TelegramChannel, str]
) -> None:
    _, url = webhook
    (call,) = tg.calls_to("setWebhook")
    assert call.params["url"] == url and call.params["secret_token"] == SECRET
    assert call.params["allowed_updates"] == ["message", "edited_message", "callback_query"]
    assert tg.calls_to("getUpdates") == []
    assert [c["command"] for c in tg.commands] == NAMES


async def test_update_with_right_secret_reaches_the_sink_once(
    tg: FakeTelegram, sink: Sink, webhook: tuple[TelegramChannel, str]
) -> None:
    update = tg.push(tg.message(chat=FORUM, text="@fanbot_bot go", thread_id=9))
    (inbound,) = await sink.wait(1)
    await until(lambda: tg.pending_updates == [], timeout=10)
    assert (inbound.text, inbound.thread.thread, inbound.mentioned) == ("go", "9", True)
    assert tg.webhook_deliveries == [(update["update_id"], 200)]
    assert len(sink.items) == 1


@pytest.mark.parametrize("headers", [{}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: ""}])
async def test_wrong_or_missing_secret_is_403_and_nothing_reaches_the_sink(
    tg: FakeTelegram, sink: Sink, webhook: tuple[TelegramChannel, str], headers: dict[str, str]
) -> None:
    _, url = webhook
    update = {"update_id": 1, **tg.message(chat=FORUM, text="@fanbot_bot hi")}
    async with ClientSession() as http, http.post(url, json=update, headers=headers) as resp:
        assert resp.status == 403
    assert sink.items == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"message": {}}', b""])
async def test_malformed_body_is_400(
    sink: Sink, webhook: tuple[TelegramChannel, str], body: bytes
) -> None:
    _, url = webhook
    headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    async with ClientSession() as http, http.post(url, data=body, headers=headers) as resp:
        assert resp.status == 400
    assert sink.items == []


async def test_failed_sink_answers_503_and_telegram_redelivers(
    tg: FakeTelegram, listener: tuple[socket.socket, str]
) -> None:
    sock, url = listener
    seen: list[Inbound] = []

    async def flaky(inbound: Inbound) -> None:
        seen.append(inbound)
        if len(seen) == 1:
            raise RuntimeError("redis down")

    channel = channel_for(tg, webhook_url=url, webhook_secret=SECRET)
    runner = await _serve(channel, sock)
    await channel.start(flaky)
    try:
        update = tg.push(tg.message(chat=FORUM, text="@fanbot_bot retry me"))
        await until(lambda: len(seen) == 2 and tg.pending_updates == [], timeout=10)
    finally:
        await channel.stop()
        await runner.cleanup()
    assert [status for _, status in tg.webhook_deliveries] == [503, 200]
    assert {(i.event_id, i.text) for i in seen} == {(seen[0].event_id, "retry me")}
    assert {uid for uid, _ in tg.webhook_deliveries} == {update["update_id"]}


# -- bad input: a clean 400 (or 200 and drop), no traceback, the next update still works ----


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert loud == [], [r.getMessage() for r in loud]


async def post(url: str, body: bytes, secret: str | None = SECRET) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    async with ClientSession() as http, http.post(url, data=body, headers=headers) as resp:
        return resp.status


async def a_real_update_still_works(tg: FakeTelegram, sink: Sink) -> None:
    tg.push(tg.message(chat=FORUM, text="@fanbot_bot still there?"))
    (inbound,) = await sink.wait(1)
    assert inbound.text == "still there?"


def nested(depth: int) -> bytes:
    return b'{"update_id": 7, "message": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    "body",
    [nested(100_000), nested(300), b'{"update_id": 7, "message": {"text": "\xff\xfe"}}'],
    ids=["recursion", "too-deep", "not-utf8"],
)
async def test_hostile_body_with_the_secret_is_400_without_traceback(
    tg: FakeTelegram,
    sink: Sink,
    webhook: tuple[TelegramChannel, str],
    caplog: pytest.LogCaptureFixture,
    body: bytes,
) -> None:
    caplog.set_level(logging.INFO)
    _, url = webhook
    assert await post(url, body) == 400
    no_traceback(caplog)
    assert sink.items == []
    await a_real_update_still_works(tg, sink)


async def test_an_update_we_cannot_read_is_200_and_dropped(
    tg: FakeTelegram,
    sink: Sink,
    webhook: tuple[TelegramChannel, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It has an update id, so it came from Telegram: a non-2xx would make Telegram send it
    # again and again, and it would fail the same way each time.
    caplog.set_level(logging.INFO)
    _, url = webhook
    assert await post(url, b'{"update_id": 8, "message": "not an object"}') == 200
    no_traceback(caplog)
    assert sink.items == []
    await a_real_update_still_works(tg, sink)


async def test_a_flood_without_the_secret_logs_one_line(
    tg: FakeTelegram,
    sink: Sink,
    webhook: tuple[TelegramChannel, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    _, url = webhook
    for secret in [None, "wrong", SECRET[:-1], SECRET + "x"] * 10:
        assert await post(url, b'{"update_id": 9}', secret=secret) == 403
    ours = [r for r in caplog.records if r.name.startswith("adapters.telegram")]
    assert len(ours) == 1 and ours[0].levelno == logging.WARNING
    no_traceback(caplog)
    await a_real_update_still_works(tg, sink)
