"""Thread-bound children on Telegram, end to end: the real gateway, forked workers, PTB and
the fake Bot API. ``/subagents spawn --thread`` in a forum opens a topic
(``createForumTopic``); a person's message there steers the running child; its answer is
announced in the topic and, with a ``t.me`` link, where it was spawned;
``/subagents close`` gives the topic back to the main agent. In a supergroup without topics
the child's thread is the replies to a message of the bot's; in a direct chat the child
stays there and says why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from adapters.telegram import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum, group, private, user
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values
from tests.e2e.thread_script import STEER, TASK, Gate, model

pytestmark = pytest.mark.e2e

FORUM = forum()
BOT = "@fanbot_bot"
ANN = user(1001, "Ann", username="ann")


@asynccontextmanager
async def running(redis_url: str, gate: Gate) -> AsyncIterator[tuple[FakeTelegram, Stack]]:
    async with FakeOpenAI(model(gate)) as fake_model, FakeTelegram() as tg:
        tg_values = {
            "bot_token": tg.token,
            "api_url": tg.api_url,
            "file_url": tg.file_url,
            "poll_timeout_seconds": 1,
        }
        values = stack_values(redis_url, fake_model.base_url, telegram=tg_values)
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            yield tg, stack


def texts(tg: FakeTelegram, topic: int | None) -> list[str]:
    return [m.text for m in tg.messages if m.message_thread_id == topic]


def has(tg: FakeTelegram, topic: int | None, part: str) -> bool:
    return any(part in t for t in texts(tg, topic))


async def test_a_child_in_its_own_topic_is_steered_there_and_closed(redis_url: str) -> None:
    gate = Gate()
    async with running(redis_url, gate) as (tg, stack):
        tg.push(tg.message(chat=FORUM, text=f"/subagents spawn --thread {TASK}", sender=ANN))
        await stack.wait_for(lambda: bool(tg.topics_created), timeout=20)
        [(chat_id, topic, name)] = tg.topics_created
        assert chat_id == FORUM["id"] and name == f"#1 general-purpose: {TASK}"
        await stack.wait_for(lambda: has(tg, topic, "Messages in this thread go to it"), timeout=20)
        await stack.wait_for(lambda: has(tg, None, "works in https://t.me/c/"), timeout=20)
        await asyncio_wait(gate.started)
        tg.push(tg.message(chat=FORUM, text=STEER, sender=ANN, thread_id=topic))
        await stack.wait_for(lambda: has(tg, topic, "📨 Passed to subagent #1"), timeout=20)
        gate.go.set()
        await stack.wait_for(lambda: has(tg, topic, "final: read"), timeout=30)
        link = f"🧵 Its thread: https://t.me/c/{str(FORUM['id'])[4:]}/{topic}"
        await stack.wait_for(lambda: has(tg, None, link), timeout=20)
        tg.push(tg.message(chat=FORUM, text="/subagents close 1", sender=ANN, thread_id=topic))
        closed = "🧵 Closed the thread of subagent #1"
        await stack.wait_for(lambda: has(tg, topic, closed), timeout=20)
        tg.push(tg.message(chat=FORUM, text=f"{BOT} hello", sender=ANN, thread_id=topic))
        await stack.wait_for(lambda: has(tg, topic, "main agent here"), timeout=20)
    [parent_copy] = [t for t in texts(tg, None) if "final: read" in t]
    assert "Subagent #1" in parent_copy and link in parent_copy
    assert sum("final: read" in t for t in texts(tg, topic)) == 1


async def test_in_a_group_without_topics_the_child_gets_a_reply_thread(redis_url: str) -> None:
    gate = Gate()
    chat = group()
    async with running(redis_url, gate) as (tg, stack):
        tg.push(tg.message(chat=chat, text=f"/subagents spawn --thread {TASK}", sender=ANN))
        await stack.wait_for(
            lambda: any(m.text.startswith("🧵 #1") for m in tg.messages), timeout=20
        )
        [root] = [m for m in tg.messages if m.text.startswith("🧵 #1")]
        assert root.reply_to is None and root.text == f"🧵 #1 general-purpose: {TASK}"
        link = f"https://t.me/c/{str(chat['id'])[4:]}/{root.message_id}"
        await stack.wait_for(lambda: replied(tg, root.message_id, "go to it"), timeout=20)
        await stack.wait_for(lambda: has(tg, None, f"works in {link}"), timeout=20)
        await asyncio_wait(gate.started)
        reply = tg.message(
            chat=chat, text=STEER, sender=ANN, thread_id=root.message_id,
            reply_to=tg.as_message(root),
        )  # fmt: skip
        tg.push(reply)
        await stack.wait_for(lambda: replied(tg, root.message_id, "📨 Passed"), timeout=20)
        gate.go.set()
        await stack.wait_for(lambda: replied(tg, root.message_id, "final: read"), timeout=30)
        await stack.wait_for(lambda: has(tg, None, f"Its thread: {link}"), timeout=20)
        close = tg.message(
            chat=chat, text="/subagents close 1", sender=ANN, thread_id=root.message_id,
            reply_to=tg.as_message(root),
        )  # fmt: skip
        tg.push(close)
        await stack.wait_for(lambda: replied(tg, root.message_id, "Closed the"), timeout=20)
    assert tg.topics_created == []
    assert len(tg.calls_to("createForumTopic")) == 1  # refused: "the chat is not a forum"


def replied(tg: FakeTelegram, root: int, part: str) -> bool:
    return any(m.reply_to == root and part in m.text for m in tg.messages)


async def test_a_direct_chat_keeps_the_child_there_and_says_why(redis_url: str) -> None:
    gate = Gate()
    gate.go.set()
    async with running(redis_url, gate) as (tg, stack):
        dm = private(ANN)
        tg.push(tg.message(chat=dm, text=f"/subagents spawn --thread {TASK}", sender=ANN))
        await stack.wait_for(lambda: has(tg, None, "couldn't open a thread of its own"), timeout=20)
        await stack.wait_for(lambda: has(tg, None, "final: nobody steered me"), timeout=30)
    assert tg.topics_created == []


async def asyncio_wait(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), timeout=20)
