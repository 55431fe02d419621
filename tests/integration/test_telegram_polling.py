"""Real PTB long-polling the fake Bot API: topics, addressing, commands, restart semantics."""

from __future__ import annotations

from adapters.telegram.channel import TelegramChannel
from adapters.telegram.convert import thread_of
from bot.testing import until
from bot.testing.fake_telegram import FakeTelegram, forum, group, private, user
from bot.types import Outbound
from tests.integration.telegram_support import Sink, channel_for, polling, sink, tg

NAMES = ["subagents", "stop", "context", "new", "model", "status", "usage", "help"]
"""The commands registered with setMyCommands, in order (pinned on purpose)."""

__all__ = ["polling", "sink", "tg"]  # fixtures

FORUM = forum()
GROUP = group()


async def test_two_topics_interleaved_keep_their_threads(
    tg: FakeTelegram, sink: Sink, polling: TelegramChannel
) -> None:
    for i in range(3):
        tg.push(tg.message(chat=FORUM, text=f"@fanbot_bot a{i}", thread_id=11))
        tg.push(tg.message(chat=FORUM, text=f"@fanbot_bot b{i}", thread_id=22))
    tg.push(tg.message(chat=FORUM, text="@fanbot_bot general"))
    items = await sink.wait(7)
    by_topic = {inbound.text: inbound.thread.thread for inbound in items}
    assert by_topic == {
        "a0": "11", "a1": "11", "a2": "11", "b0": "22", "b1": "22", "b2": "22", "general": None,
    }  # fmt: skip
    assert {i.thread.account for i in items} == {str(tg.bot_id)}
    assert all(i.mentioned and i.thread.chat == str(FORUM["id"]) for i in items)

    for inbound in items:
        await polling.send(Outbound(thread=inbound.thread, text=f"re: {inbound.text}"))
    replies = {m.text: m.message_thread_id for m in tg.messages}
    assert replies == {
        "re: a0": 11, "re: a1": 11, "re: a2": 11, "re: b0": 22, "re: b1": 22, "re: b2": 22,
        "re: general": None,
    }  # fmt: skip
    general_call = next(c for c in tg.calls_to("sendMessage") if c.params["text"] == "re: general")
    assert "message_thread_id" not in general_call.params


async def test_group_addressing(tg: FakeTelegram, sink: Sink, polling: TelegramChannel) -> None:
    tg.add_chat(GROUP)
    await polling.send(Outbound(thread=thread_of(GROUP["id"], None, me=polling.me), text="hi"))
    mine = tg.as_message(tg.messages[0])
    tg.push(tg.message(chat=GROUP, text="just chatting"))
    tg.push(tg.message(chat=GROUP, text="hey @fanbot_bot what now"))
    tg.push(tg.message(chat=GROUP, text="agreed", reply_to=mine))
    tg.push(tg.message(chat=GROUP, text="/subagents@fanbot_bot list"))
    tg.push(tg.message(chat=GROUP, text="/subagents@other_bot list"))
    tg.push(tg.message(chat=GROUP, text="/stop"))
    tg.push({"message": {"message_id": 999, "date": 1, "chat": GROUP, "from": user(7),
                         "new_chat_members": [user(8)]}})  # fmt: skip
    tg.push(tg.message(chat=GROUP, text="last"))
    items = await sink.wait(6)
    # The gateway, not the adapter, ignores unaddressed group messages: they arrive with
    # mentioned=False. Another bot's command and service messages are dropped here.
    assert [(i.text, i.mentioned) for i in items] == [
        ("just chatting", False),
        ("hey what now", True),
        ("agreed", True),
        ("/subagents list", True),
        ("/stop", True),
        ("last", False),
    ]


async def test_private_chat_is_a_dm(tg: FakeTelegram, sink: Sink, polling: TelegramChannel) -> None:
    ann = user(555, "Ann")
    tg.push(tg.message(chat=private(ann), sender=ann, text="hello"))
    (inbound,) = await sink.wait(1)
    assert inbound.is_dm and inbound.mentioned and inbound.thread.thread is None
    assert inbound.sender.user_id == "555"


async def test_start_registers_commands_and_clears_webhook(
    tg: FakeTelegram, polling: TelegramChannel
) -> None:
    assert [c["command"] for c in tg.commands] == NAMES
    assert tg.calls_to("deleteWebhook")
    assert polling.me.username == "fanbot_bot"


async def test_updates_queued_while_down_are_processed_once_across_restarts(
    tg: FakeTelegram,
) -> None:
    old = [tg.push(tg.message(chat=FORUM, text=f"old {i}", thread_id=11)) for i in range(3)]
    first = Sink()
    channel = channel_for(tg)
    await channel.start(first)
    await first.wait(3)
    await channel.stop()
    assert tg.pending_updates == []  # stop() confirmed the offset to Telegram
    last_poll = tg.calls_to("getUpdates")[-1].params
    assert (last_poll["offset"], last_poll["timeout"]) == (old[-1]["update_id"] + 1, 0)

    tg.push(tg.message(chat=FORUM, text="new", thread_id=11))
    second = Sink()
    restarted = channel_for(tg)
    await restarted.start(second)
    try:
        # Unconfirmed old updates would come first in the same batch as the new one.
        await second.wait(1)
    finally:
        await restarted.stop()
    assert [i.text for i in first.items] == ["old 0", "old 1", "old 2"]
    assert [i.text for i in second.items] == ["new"]


async def test_update_the_sink_failed_on_is_fetched_again_not_skipped(tg: FakeTelegram) -> None:
    seen: list[str] = []
    unconfirmed: list[set[int]] = []  # what Telegram still holds, at each hand-over

    async def flaky(inbound: object) -> None:
        seen.append(getattr(inbound, "text", ""))
        unconfirmed.append({u["update_id"] for u in tg.pending_updates})
        if len(seen) == 1:
            raise RuntimeError("redis down")

    channel = channel_for(tg)
    await channel.start(flaky)
    try:
        one = tg.push(tg.message(chat=GROUP, text="one"))
        tg.push(tg.message(chat=GROUP, text="two"))
        await until(lambda: len(seen) == 3 and tg.pending_updates == [], timeout=10)
    finally:
        await channel.stop()
    assert seen == ["one", "one", "two"]  # in order, the failed one again, none skipped
    assert one["update_id"] in unconfirmed[1]  # refetched, not confirmed, after the failure
