"""The fake Bot API answers a real PTB ``Bot`` the way Telegram does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import telegram
from telegram.error import BadRequest, Conflict, InvalidToken, RetryAfter

import adapters.telegram.channel  # noqa: F401  (opts PTB into timedelta periods, no warnings)
from bot.testing import until
from bot.testing.fake_telegram import FakeTelegram, forum, group
from tests.integration.telegram_support import tg

__all__ = ["tg"]  # fixtures

FORUM = forum()


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[telegram.Bot]:
    async with telegram.Bot(tg.token, base_url=tg.api_url, base_file_url=tg.file_url) as client:
        yield client


async def test_get_me(bot: telegram.Bot, tg: FakeTelegram) -> None:
    assert (bot.id, bot.username) == (tg.bot_id, tg.username)


async def test_wrong_token_is_rejected(tg: FakeTelegram) -> None:
    client = telegram.Bot("1:wrong", base_url=tg.api_url)
    with pytest.raises(InvalidToken):
        await client.initialize()
    await client.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"message_thread_id": 1}, "Message thread not found"),
        ({"message_thread_id": 404}, "Message thread not found"),
        ({"text": "x" * 4097}, "Message is too long"),
        ({"text": "🙂" * 2049}, "Message is too long"),  # 4098 UTF-16 units
        ({"text": "<b>open", "parse_mode": "HTML"}, 'find end tag corresponding to start tag "b"'),
        ({"text": "a <3", "parse_mode": "HTML"}, 'Unsupported start tag "3" at byte offset 2'),
        ({"text": "<b>x</i>", "parse_mode": "HTML"}, "Unmatched end tag at byte offset 4"),
        ({"text": "<b></b>", "parse_mode": "HTML"}, "Message text is empty"),
    ],
)
async def test_send_message_checks(
    bot: telegram.Bot, tg: FakeTelegram, kwargs: dict[str, object], error: str
) -> None:
    tg.add_topic(FORUM, 7)
    params: dict[str, object] = {"chat_id": FORUM["id"], "text": "hello"} | kwargs
    with pytest.raises(BadRequest, match=f"(?i){error}"):
        await bot.send_message(**params)  # type: ignore[arg-type]
    assert tg.messages == []


async def test_send_message_limits_are_inclusive(bot: telegram.Bot, tg: FakeTelegram) -> None:
    tg.add_chat(FORUM)
    await bot.send_message(FORUM["id"], "🙂" * 2048)
    await bot.send_message(FORUM["id"], "&lt;" * 4096, parse_mode="HTML")
    assert [len(m.text) for m in tg.messages] == [2048, 4096]


async def test_429_carries_retry_after(bot: telegram.Bot, tg: FakeTelegram) -> None:
    tg.add_chat(FORUM)
    tg.inject("sendMessage", status=429, retry_after=5)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(FORUM["id"], "x")
    assert caught.value.retry_after == 5  # seconds: nothing sets PTB_TIMEDELTA in the environment
    await bot.send_message(FORUM["id"], "x")


async def test_get_updates_offset_confirms(bot: telegram.Bot, tg: FakeTelegram) -> None:
    first = tg.push(tg.message(chat=group(), text="a"))
    second = tg.push(tg.message(chat=group(), text="b"))
    got = await bot.get_updates(timeout=0)
    assert [u.update_id for u in got] == [first["update_id"], second["update_id"]]
    got = await bot.get_updates(offset=second["update_id"], timeout=0)
    assert [u.update_id for u in got] == [second["update_id"]]
    assert await bot.get_updates(offset=second["update_id"] + 1, timeout=0) == ()
    assert tg.pending_updates == []


async def test_long_poll_wakes_on_push(bot: telegram.Bot, tg: FakeTelegram) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await until(lambda: tg.long_polls == 1)
    tg.push(tg.message(chat=group(), text="wake"))
    (update,) = await poll
    assert update.message is not None and update.message.text == "wake"


async def test_second_poller_conflicts_the_first(bot: telegram.Bot, tg: FakeTelegram) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=30))
    await until(lambda: tg.long_polls == 1)
    # A second bot process (PTB keeps one getUpdates connection per Bot).
    async with telegram.Bot(tg.token, base_url=tg.api_url) as other:
        assert await other.get_updates(timeout=0) == ()
    with pytest.raises(Conflict, match=r"(?i)terminated by other getUpdates"):
        await first


async def test_get_updates_refused_while_webhook_set(bot: telegram.Bot, tg: FakeTelegram) -> None:
    await bot.set_webhook("http://127.0.0.1:9/hook", secret_token="abc")
    info = await bot.get_webhook_info()
    assert info.url == "http://127.0.0.1:9/hook"
    with pytest.raises(Conflict, match=r"(?i)webhook is active"):
        await bot.get_updates(timeout=0)
    await bot.delete_webhook()
    assert await bot.get_updates(timeout=0) == ()
