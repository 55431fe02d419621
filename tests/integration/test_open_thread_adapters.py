"""``ThreadOpener`` through the real SDKs into the fakes: a Telegram forum topic, a reply
thread in a group without topics, the refusal in a direct chat, a Slack top-level message
and its permalink."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.slack import SlackChannel
from adapters.telegram.channel import TelegramChannel
from adapters.telegram.convert import thread_of
from bot.errors import DeliveryError
from bot.ports import ThreadOpener
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram, forum, group, private, user
from bot.types import Inbound, Outbound, ThreadRef
from tests.integration.telegram_support import polling, sink, tg

__all__ = ["polling", "sink", "tg"]  # fixtures

FORUM = forum()
PARENT = ThreadRef(platform="slack", account="T0FANBOT", chat="C0GENERAL", thread="700.1")


async def test_telegram_opens_a_forum_topic_and_posts_into_it(
    tg: FakeTelegram, polling: TelegramChannel
) -> None:
    tg.add_chat(FORUM)
    assert isinstance(polling, ThreadOpener)
    opened = await polling.open_thread(thread_of(FORUM["id"], None, me=polling.me), "#1 x: y")
    [(chat_id, topic, name)] = tg.topics_created
    (call,) = tg.calls_to("createForumTopic")
    assert call.params == {"chat_id": FORUM["id"], "name": "#1 x: y"}
    assert (chat_id, name) == (FORUM["id"], "#1 x: y")
    assert opened.thread.thread == str(topic)
    assert opened.link == f"https://t.me/c/{str(FORUM['id'])[4:]}/{topic}"
    await polling.send(Outbound(thread=opened.thread, text="hello topic"))
    assert tg.messages[-1].message_thread_id == topic


async def test_telegram_opens_a_reply_thread_in_a_group_without_topics(
    tg: FakeTelegram, polling: TelegramChannel
) -> None:
    chat = group()
    tg.add_chat(chat)
    opened = await polling.open_thread(thread_of(chat["id"], None, me=polling.me), "#1 x: y")
    [root] = tg.messages
    assert root.text == "🧵 #1 x: y" and root.reply_to is None
    assert opened.thread.thread == f"reply:{root.message_id}"
    assert opened.link == f"https://t.me/c/{str(chat['id'])[4:]}/{root.message_id}"
    await polling.send(Outbound(thread=opened.thread, text="in the thread"))
    (call,) = tg.calls_to("sendMessage")[1:]
    assert "message_thread_id" not in call.params
    assert call.params["reply_parameters"]["message_id"] == root.message_id
    assert tg.messages[-1].reply_to == root.message_id


async def test_telegram_refuses_a_direct_chat_permanently(
    tg: FakeTelegram, polling: TelegramChannel
) -> None:
    dm = private(user(7, "Ann"))
    tg.add_chat(dm)
    with pytest.raises(DeliveryError) as err:
        await polling.open_thread(thread_of(dm["id"], None, me=polling.me), "#1 x: y")
    assert err.value.permanent and "not a forum" in str(err.value)
    assert tg.topics_created == [] and tg.messages == []


async def ignore(inbound: Inbound) -> None:
    raise AssertionError(f"no ingress expected: {inbound}")


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


async def test_slack_opens_a_top_level_message_with_its_permalink(slack: FakeSlack) -> None:
    adapter = SlackChannel(settings=slack.settings(mode="http", app_token=None))
    await adapter.start(ignore)
    try:
        opened = await adapter.open_thread(PARENT, "#2 explore: map it")
    finally:
        await adapter.stop()
    [root] = slack.messages
    assert root.thread_ts is None and root.text == "🧵 #2 explore: map it"
    assert opened.thread == ThreadRef(
        platform="slack", account=PARENT.account, chat=PARENT.chat, thread=root.ts
    )
    assert (
        opened.link == f"https://fake.slack.invalid/archives/C0GENERAL/p{root.ts.replace('.', '')}"
    )
