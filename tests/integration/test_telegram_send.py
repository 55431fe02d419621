"""Egress through real PTB into the fake: topics, limits, flood control, fallbacks."""

from __future__ import annotations

import re

import pytest

from adapters.telegram.channel import TelegramChannel
from adapters.telegram.convert import thread_of
from bot.errors import DeliveryError
from bot.ports import PartLog
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.telegram_html import utf16_len
from bot.types import Outbound, ThreadRef
from tests.integration.telegram_support import polling, sink, tg

__all__ = ["polling", "sink", "tg"]  # fixtures

FORUM = forum()
TOPIC = 31


@pytest.fixture
def topic(tg: FakeTelegram, polling: TelegramChannel) -> ThreadRef:
    tg.add_topic(FORUM, TOPIC)
    return thread_of(FORUM["id"], TOPIC, me=polling.me)


@pytest.fixture
def general(tg: FakeTelegram, polling: TelegramChannel) -> ThreadRef:
    tg.add_chat(FORUM)
    return thread_of(FORUM["id"], None, me=polling.me)


async def test_general_topic_is_sent_without_thread_id(
    tg: FakeTelegram, polling: TelegramChannel, general: ThreadRef
) -> None:
    explicit_one = ThreadRef(platform="telegram", account="4242", chat=general.chat, thread="1")
    await polling.send(Outbound(thread=general, text="one"))
    await polling.send(Outbound(thread=explicit_one, text="two"))
    assert [m.message_thread_id for m in tg.messages] == [None, None]
    assert all("message_thread_id" not in c.params for c in tg.calls_to("sendMessage"))


async def test_topic_send_carries_thread_id_and_html(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    ids = await polling.send(Outbound(thread=topic, text="**done** <x> & y"))
    (call,) = tg.calls_to("sendMessage")
    assert call.params["message_thread_id"] == TOPIC
    assert call.params["parse_mode"] == "HTML"
    assert tg.messages[0].text == "done <x> & y"
    assert ids == [str(tg.messages[0].message_id)]


async def test_429_raises_retry_after_and_a_retry_delivers_once(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    tg.inject("sendMessage", status=429, retry_after=7)
    message = Outbound(thread=topic, text="announce", idempotency_key="announce:r1")
    with pytest.raises(DeliveryError) as caught:
        await polling.send(message)
    assert caught.value.retry_after == 7 and not caught.value.permanent
    assert tg.messages == []
    await polling.send(message)
    assert [m.text for m in tg.messages] == ["announce"]


async def test_429_mid_split_resumes_without_duplicates(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    text = "\n\n".join(f"paragraph {i} " + "x" * 1500 for i in range(6))
    message = Outbound(thread=topic, text=text, idempotency_key="reply:abc")
    tg.inject("sendMessage", status=429, retry_after=2, after=2)
    recorded: list[tuple[int, str]] = []

    async def recorder(index: int, message_id: str) -> None:
        recorded.append((index, message_id))

    parts = PartLog(key="reply:abc", recorder=recorder)  # what egress keeps in Redis
    with pytest.raises(DeliveryError) as caught:
        await polling.send(message, parts=parts)
    assert caught.value.retry_after == 2
    assert len(tg.messages) == 2
    assert recorded == [(0, str(tg.messages[0].message_id)), (1, str(tg.messages[1].message_id))]
    ids = await polling.send(message, parts=PartLog(key="reply:abc", posted=dict(recorded)))
    texts = [m.text for m in tg.messages]
    assert len(ids) == len(texts) == len(set(texts)) > 2
    assert ids == [str(m.message_id) for m in tg.messages]
    assert all(f"paragraph {i} " in "".join(texts) for i in range(6))
    again = PartLog(key="reply:abc", posted=dict(enumerate(ids)), in_doubt=True)
    assert await polling.send(message, parts=again) == ids  # every part posted: none again
    assert len(tg.messages) == len(ids)


def _long_reply() -> str:
    """20,000+ characters: prose with emoji (2 UTF-16 units each), lists, code blocks, and
    one code block longer than a whole message."""
    blocks = []
    for i in range(40):
        prose = f"Some *prose* with emoji 😀🎉 and <angle> & amp {i}. " * 4
        blocks.append(f"## Section {i} 🚀\n\n{prose}")
        blocks.append(f"- item {i}a 🙂\n- item {i}b")
        code = "\n".join(f"    value_{i}_{j} = compute({j}) < limit  # 🧪" for j in range(6))
        blocks.append(f"```python\ndef block_{i}():\n{code}\n```")
    big = "\n".join(f"big_{k} = '🧪' * {k}" for k in range(300))
    blocks.insert(20, f"```python\n{big}\n```")
    text = "\n\n".join(blocks)
    assert len(text) >= 20_000
    return text


async def test_20k_reply_is_split_and_every_part_accepted(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    text = _long_reply()
    ids = await polling.send(Outbound(thread=topic, text=text))
    calls = tg.calls_to("sendMessage")
    assert len(ids) == len(calls) == len(tg.messages) > 5  # every call accepted, none retried
    assert all(utf16_len(m.text) <= 4096 and m.parse_mode == "HTML" for m in tg.messages)
    shown = "\n".join(m.text for m in tg.messages)
    assert "```" not in shown  # fences became <pre>, none leaked as raw text
    for i in range(40):
        assert f"Section {i} 🚀" in shown
        for j in range(6):
            line = f"    value_{i}_{j} = compute({j}) < limit  # 🧪"
            holder = next(m for m in tg.messages if line in m.text)
            assert re.search(rf"<pre><code[^>]*>[^<]*value_{i}_{j} ", holder.raw_text)


async def test_unparseable_html_is_resent_as_plain_text(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    tg.inject(
        "sendMessage",
        status=400,
        description='Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0',
    )
    ids = await polling.send(Outbound(thread=topic, text="**bold** text"))
    first, second = tg.calls_to("sendMessage")
    assert first.params["parse_mode"] == "HTML" and "parse_mode" not in second.params
    assert [(m.text, m.parse_mode) for m in tg.messages] == [("**bold** text", None)]
    assert ids == [str(tg.messages[0].message_id)]


@pytest.mark.parametrize(
    ("status", "description", "permanent"),
    [
        (500, "Internal Server Error", False),
        (502, "Bad Gateway", False),
        (403, "Forbidden: bot was kicked from the supergroup chat", True),
        (400, "Bad Request: message thread not found", True),
    ],
)
async def test_failures_map_to_delivery_errors(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef,
    status: int, description: str, permanent: bool,
) -> None:  # fmt: skip
    tg.inject("sendMessage", status=status, description=description)
    with pytest.raises(DeliveryError) as caught:
        await polling.send(Outbound(thread=topic, text="x"))
    assert caught.value.permanent is permanent and caught.value.retry_after is None


async def test_unknown_chat_is_permanent(tg: FakeTelegram, polling: TelegramChannel) -> None:
    nowhere = thread_of(-100999, None, me=polling.me)
    with pytest.raises(DeliveryError, match="Chat not found") as caught:
        await polling.send(Outbound(thread=nowhere, text="x"))
    assert caught.value.permanent


async def test_edit_replaces_text_and_ignores_not_modified(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    (message_id,) = await polling.send(Outbound(thread=topic, text="⏳ running"))
    await polling.edit(topic, message_id, "✅ **done**")
    await polling.edit(topic, message_id, "✅ **done**")  # Telegram: "message is not modified"
    assert tg.messages[0].edits == ["✅ done"]
    assert len(tg.calls_to("editMessageText")) == 2
    tg.inject("editMessageText", status=429, retry_after=3)
    with pytest.raises(DeliveryError) as caught:
        await polling.edit(topic, message_id, "later")
    assert caught.value.retry_after == 3


async def test_delete_removes_the_status_message_once(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef
) -> None:
    (message_id,) = await polling.send(Outbound(thread=topic, text="⏳ running"))
    await polling.delete(topic, message_id)
    assert tg.messages[0].deleted
    await polling.delete(topic, message_id)  # already gone: nothing to do
    assert len(tg.calls_to("deleteMessage")) == 2
    tg.inject("deleteMessage", status=400, description="Bad Request: message can't be deleted")
    (other,) = await polling.send(Outbound(thread=topic, text="⏳ old"))
    with pytest.raises(DeliveryError) as caught:
        await polling.delete(topic, other)
    assert caught.value.permanent


async def test_typing_targets_the_topic_and_never_raises(
    tg: FakeTelegram, polling: TelegramChannel, topic: ThreadRef, general: ThreadRef
) -> None:
    await polling.typing(topic)
    await polling.typing(general)
    tg.inject("sendChatAction", status=429, retry_after=1)
    await polling.typing(topic)
    calls = tg.calls_to("sendChatAction")
    assert [(c.params["action"], c.params.get("message_thread_id")) for c in calls] == [
        ("typing", TOPIC),
        ("typing", None),
        ("typing", TOPIC),
    ]
