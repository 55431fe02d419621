"""Button presses that are not fanbot's, and updates PTB cannot parse, on both ways in."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession, web

from adapters.telegram.channel import NOT_OURS, SECRET_HEADER, TelegramChannel
from bot.testing import until
from bot.testing.fake_telegram import FakeTelegram, forum, user
from bot.testing.netutil import bind_loopback
from tests.integration.telegram_support import Sink, channel_for, polling, sink, tg

__all__ = ["polling", "sink", "tg"]  # fixtures

SECRET = "s3cret-token_42"
FORUM = forum()
ANN = user(1001, "Ann", username="ann")


def stale_press(query_id: str, data: str = "action_accept") -> dict[str, object]:
    """A press on a keyboard fanbot did not send (another bot's, an earlier deployment's)."""
    message = {
        "message_id": 40, "date": 1, "chat": FORUM, "from": user(4242, "fanbot"),
        "message_thread_id": 9, "is_topic_message": True, "text": "Pick one",
    }  # fmt: skip
    return {
        "callback_query": {
            "id": query_id, "from": ANN, "message": message, "chat_instance": "ci1", "data": data,
        }
    }  # fmt: skip


@pytest.fixture
async def webhook(tg: FakeTelegram, sink: Sink) -> AsyncIterator[str]:
    sock: socket.socket = bind_loopback()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/tg/hook"
    channel = channel_for(tg, webhook_url=url, webhook_secret=SECRET)
    app = web.Application()
    app.add_routes(channel.http_routes())
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await channel.start(sink)
    yield url
    await channel.stop()
    await runner.cleanup()


async def test_a_stale_press_is_answered_once_and_reaches_nobody(
    tg: FakeTelegram, sink: Sink, webhook: str
) -> None:
    update = {"update_id": 70, **stale_press("777")}
    tg.know(update)
    headers = {SECRET_HEADER: SECRET}
    async with ClientSession() as http:
        for _ in range(2):  # Telegram's redelivery
            async with http.post(webhook, json=update, headers=headers) as resp:
                assert resp.status == 200
    [answer] = tg.callback_answers
    assert (answer.callback_query_id, answer.text, answer.show_alert) == ("777", NOT_OURS, False)
    assert sink.items == [] and tg.messages == []


async def test_our_press_still_reaches_the_gateway(
    tg: FakeTelegram, sink: Sink, webhook: str
) -> None:
    tg.push(stale_press("778", data="!approve 3f9a0b1c"))
    (inbound,) = await sink.wait(1)
    assert (inbound.text, inbound.callback, inbound.thread.thread) == (
        "!approve 3f9a0b1c",
        "778",
        "9",
    )
    assert tg.callback_answers == []  # the gateway answers it (decision), not the adapter


async def test_polling_answers_a_stale_press(
    tg: FakeTelegram, sink: Sink, polling: TelegramChannel
) -> None:
    tg.push(stale_press("779"))
    tg.push(tg.message(chat=FORUM, text="@fanbot_bot after", thread_id=9))
    (inbound,) = await sink.wait(1)
    assert inbound.text == "after"
    assert [(a.callback_query_id, a.text) for a in tg.callback_answers] == [("779", NOT_OURS)]


async def test_polling_goes_on_past_an_update_ptb_cannot_parse(
    tg: FakeTelegram, sink: Sink, polling: TelegramChannel
) -> None:
    # A chat without its type and a sender without is_bot: PTB refuses the whole batch.
    tg.push({"message": {"message_id": 1, "date": 1, "chat": {"id": 5}, "text": "x"}})
    tg.push({"message": {"message_id": 2, "date": 1, "chat": {"id": 6, "type": "private"},
                         "from": {"id": 6, "first_name": "Bo"}, "text": "hello"}})  # fmt: skip
    tg.push(tg.message(chat=FORUM, text="@fanbot_bot still here", thread_id=9))
    items = await sink.wait(2)
    assert [(i.thread.chat, i.text) for i in items] == [
        ("6", "hello"),
        (str(FORUM["id"]), "still here"),
    ]
    await until(lambda: tg.pending_updates == [], timeout=10)
