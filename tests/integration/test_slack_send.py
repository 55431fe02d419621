"""Slack egress: threads, splitting, rate limits, ephemeral answers, edits, status."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import SlackChannel
from bot.errors import DeliveryError
from bot.ports import PartLog
from bot.testing.fake_slack import MAX_TEXT_CHARS, FakeSlack
from bot.types import Inbound, Outbound, OutboundKind, ThreadRef

THREAD = ThreadRef(platform="slack", account="T0FANBOT", chat="C0GENERAL", thread="700.1")


async def ignore(inbound: Inbound) -> None:
    raise AssertionError(f"no ingress expected: {inbound}")


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def channel(slack: FakeSlack) -> AsyncIterator[SlackChannel]:
    adapter = SlackChannel(settings=slack.settings(mode="http", app_token=None))
    await adapter.start(ignore)
    yield adapter
    await adapter.stop()


async def test_reply_goes_into_the_thread_as_mrkdwn(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    ids = await channel.send(Outbound(thread=THREAD, text="**Done**: see [docs](https://x.io)"))
    [posted] = slack.messages
    assert ids == [posted.ts]
    assert posted.thread_ts == "700.1" and posted.channel == "C0GENERAL"
    assert posted.text == "*Done*: see <https://x.io|docs>"


async def test_top_level_dm_reply_has_no_thread(slack: FakeSlack, channel: SlackChannel) -> None:
    dm = ThreadRef(platform="slack", account="T0FANBOT", chat="D0ANN")
    await channel.send(Outbound(thread=dm, text="hi"))
    [call] = slack.calls_to("chat.postMessage")
    assert "thread_ts" not in call.args
    assert slack.thread("D0ANN", None)[0].text == "hi"


async def test_short_429_is_waited_out_and_delivered_once(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    slack.fail("chat.postMessage", status=429, retry_after=1)
    started = time.monotonic()
    ids = await channel.send(Outbound(thread=THREAD, text="announce", kind=OutboundKind.ANNOUNCE))
    assert time.monotonic() - started >= 1.0  # Retry-After was honoured
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]
    assert [m.text for m in slack.messages] == ["announce"]
    assert ids == [slack.messages[0].ts]


async def test_long_429_becomes_delivery_error_with_retry_after(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    slack.fail("chat.postMessage", status=429, retry_after=30)
    with pytest.raises(DeliveryError) as info:
        await channel.send(Outbound(thread=THREAD, text="announce"))
    assert info.value.retry_after == 30 and not info.value.permanent
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert slack.messages == []


async def test_in_client_retry_is_bounded_to_one(slack: FakeSlack, channel: SlackChannel) -> None:
    slack.fail("chat.postMessage", status=429, retry_after=1, times=3)
    with pytest.raises(DeliveryError) as info:
        await channel.send(Outbound(thread=THREAD, text="announce"))
    assert info.value.retry_after == 1
    assert len(slack.calls_to("chat.postMessage")) == 2
    assert slack.messages == []


@pytest.mark.parametrize(
    ("status", "error", "permanent"),
    [
        (500, None, False),
        (503, None, False),
        (200, "channel_not_found", True),
        (200, "fatal_error", False),
    ],
)
async def test_failures_map_to_delivery_errors(
    slack: FakeSlack, channel: SlackChannel, status: int, error: str | None, permanent: bool
) -> None:
    slack.fail("chat.postMessage", status=status, error=error)
    with pytest.raises(DeliveryError) as info:
        await channel.send(Outbound(thread=THREAD, text="x"))
    assert info.value.permanent is permanent
    assert info.value.retry_after is None


def _code_block(n: int) -> str:
    return (
        "```python\n"
        + "\n".join(f"value_{n}_{i} = compute({i}) < limit" for i in range(60))
        + "\n```"
    )


async def test_fifty_thousand_characters_become_ordered_parts_with_intact_code(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    sections = []
    n = 0
    while sum(len(s) for s in sections) < 50_000:
        sections.append(f"## Part {n}\n\nSome **analysis** of section {n}. " * 3)
        sections.append(_code_block(n))
        n += 1
    text = "\n\n".join(sections)
    assert len(text) >= 50_000

    ids = await channel.send(Outbound(thread=THREAD, text=text, kind=OutboundKind.ANNOUNCE))

    posted = slack.messages
    assert len(posted) >= 13 and ids == [m.ts for m in posted]
    assert all(m.thread_ts == "700.1" for m in posted)
    assert all(len(m.text) <= 3_900 for m in posted)
    for m in posted:
        fences = [line for line in m.text.splitlines() if line.startswith("```")]
        assert len(fences) % 2 == 0, m.text[:200]
    joined = "\n".join(m.text for m in posted)
    positions = [joined.index(f"value_{k}_59 = compute(59) &lt; limit") for k in range(n)]
    assert positions == sorted(positions)
    for k in range(n):
        for i in range(60):
            assert f"value_{k}_{i} = compute({i}) &lt; limit" in joined


async def test_ephemeral_answer(slack: FakeSlack, channel: SlackChannel) -> None:
    where = ThreadRef(platform="slack", account="T0FANBOT", chat="C0OPS")
    ids = await channel.send(Outbound(thread=where, text="1 run", ephemeral_to="U0ANN"))
    [eph] = slack.ephemerals
    assert ids == [eph.ts] and eph.ephemeral_to == "U0ANN" and eph.channel == "C0OPS"
    assert slack.messages == []


async def test_edit_updates_the_status_message(slack: FakeSlack, channel: SlackChannel) -> None:
    [ts] = await channel.send(Outbound(thread=THREAD, text="⏳ running", kind=OutboundKind.STATUS))
    await channel.edit(THREAD, ts, "✅ **done**")
    [call] = slack.calls_to("chat.update")
    assert call.args["ts"] == ts and call.args["channel"] == "C0GENERAL"
    [posted] = slack.messages
    assert posted.text == "✅ *done*" and posted.edits == ["⏳ running"]


async def test_delete_removes_the_status_message(slack: FakeSlack, channel: SlackChannel) -> None:
    [ts] = await channel.send(Outbound(thread=THREAD, text="⏳ running", kind=OutboundKind.STATUS))
    await channel.delete(THREAD, ts)
    [call] = slack.calls_to("chat.delete")
    assert call.args["ts"] == ts and call.args["channel"] == "C0GENERAL"
    assert slack.messages[0].deleted
    with pytest.raises(DeliveryError) as info:  # gone: the caller edits nothing further
        await channel.delete(THREAD, ts)
    assert info.value.permanent


async def test_edit_of_unknown_message_is_permanent(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    with pytest.raises(DeliveryError) as info:
        await channel.edit(THREAD, "999.999", "x")
    assert info.value.permanent


async def test_typing_sets_assistant_status_and_swallows_errors(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    await channel.typing(THREAD)
    assert slack.statuses == [
        {"channel_id": "C0GENERAL", "thread_ts": "700.1", "status": "is working…"}
    ]
    slack.fail("assistant.threads.setStatus", status=200, error="not_allowed")
    await channel.typing(THREAD)
    await channel.typing(ThreadRef(platform="slack", account="T", chat="D0ANN"))
    assert len(slack.calls_to("assistant.threads.setStatus")) == 2


async def test_fake_rejects_text_over_slacks_limit(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    with pytest.raises(SlackApiError) as info:
        await client.chat_postMessage(channel="C0GENERAL", text="x" * (MAX_TEXT_CHARS + 1))
    assert info.value.response["error"] == "msg_too_long"
    ok = await client.chat_postMessage(channel="C0GENERAL", text="x" * MAX_TEXT_CHARS)
    assert ok["ok"]


async def test_typing_never_waits_out_a_rate_limit(slack: FakeSlack, channel: SlackChannel) -> None:
    slack.fail("assistant.threads.setStatus", status=429, retry_after=5)
    started = time.monotonic()
    await channel.typing(THREAD)
    assert time.monotonic() - started < 5
    assert [c.status for c in slack.calls_to("assistant.threads.setStatus")] == [429]


# -- exactly once: metadata on every part, a part in doubt is looked up, not reposted -----


def _long_text() -> str:
    return "\n\n".join(f"paragraph {i} " + "x" * 1500 for i in range(8))


async def test_every_part_carries_its_outbox_key_and_index_as_metadata(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    message = Outbound(thread=THREAD, text=_long_text(), idempotency_key="announce:r1")
    ids = await channel.send(message, parts=PartLog(key="announce:r1"))
    assert len(ids) == len(slack.messages) > 2
    assert [m.metadata for m in slack.messages] == [
        {"event_type": "fanbot_outbox", "event_payload": {"key": "announce:r1", "part": i}}
        for i in range(len(ids))
    ]
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    plain = await client.conversations_replies(channel="C0GENERAL", ts="700.1")
    assert all("metadata" not in m for m in plain["messages"])  # only when asked for
    full = await client.conversations_replies(
        channel="C0GENERAL", ts="700.1", include_all_metadata=True
    )
    assert [m["metadata"]["event_payload"]["part"] for m in full["messages"]] == list(
        range(len(ids))
    )


@pytest.mark.parametrize("thread_ts", ["700.1", None], ids=["thread", "channel-root"])
async def test_a_part_in_doubt_is_found_in_slack_and_not_posted_again(
    slack: FakeSlack, channel: SlackChannel, thread_ts: str | None
) -> None:
    where = ThreadRef(platform="slack", account="T0FANBOT", chat="D0ANN", thread=thread_ts)
    message = Outbound(thread=where, text=_long_text(), idempotency_key="announce:r2")
    slack.fail("chat.postMessage", status=500, after=3)  # parts 0-2 go out, then a 500
    with pytest.raises(DeliveryError):
        await channel.send(message, parts=PartLog(key="announce:r2"))
    first_three = [m.ts for m in slack.messages]
    # A gateway died after Slack took part 2 and before Redis recorded it.
    book = PartLog(key="announce:r2", posted={0: first_three[0], 1: first_three[1]}, in_doubt=True)
    ids = await channel.send(message, parts=book)
    texts = [m.text for m in slack.messages]
    assert len(texts) == len(set(texts)) == len(ids) > 3  # nothing twice
    assert ids == [m.ts for m in slack.messages] and ids[:3] == first_three
    lookup = "conversations.replies" if thread_ts else "conversations.history"
    assert len(slack.calls_to(lookup)) == 1
    assert slack.calls_to(lookup)[0].args["include_all_metadata"] in ("1", "true", True)


async def test_no_lookup_unless_in_doubt_and_another_keys_parts_do_not_count(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    await channel.send(Outbound(thread=THREAD, text="other"), parts=PartLog(key="announce:x"))
    fresh = PartLog(key="announce:y")
    await channel.send(Outbound(thread=THREAD, text="mine"), parts=fresh)
    assert slack.calls_to("conversations.replies") == []
    again = PartLog(key="announce:z", in_doubt=True)  # in doubt, but nothing posted for it
    await channel.send(Outbound(thread=THREAD, text="third"), parts=again)
    assert [m.text for m in slack.messages] == ["other", "mine", "third"]
    assert len(slack.calls_to("conversations.replies")) == 1


async def test_a_lookup_slack_refuses_falls_back_to_posting_and_a_5xx_retries_later(
    slack: FakeSlack, channel: SlackChannel
) -> None:
    message = Outbound(thread=THREAD, text="announce", idempotency_key="announce:r3")
    slack.fail("conversations.replies", status=500)
    with pytest.raises(DeliveryError) as info:
        await channel.send(message, parts=PartLog(key="announce:r3", in_doubt=True))
    assert not info.value.permanent and slack.messages == []  # unknown yet: try again later
    slack.fail("conversations.replies", status=200, error="missing_scope")
    await channel.send(message, parts=PartLog(key="announce:r3", in_doubt=True))
    assert [m.text for m in slack.messages] == ["announce"]  # at least once without history
    slack.fail("conversations.replies", status=200, error="not_allowed_token_type")
    await channel.send(message, parts=PartLog(key="announce:r3", in_doubt=True))
    assert len(slack.messages) == 2  # any definite refusal: post rather than dead-letter


async def test_ephemeral_parts_carry_no_metadata(slack: FakeSlack, channel: SlackChannel) -> None:
    where = ThreadRef(platform="slack", account="T0FANBOT", chat="C0OPS")
    message = Outbound(thread=where, text="1 run", ephemeral_to="U0ANN", idempotency_key="c:1")
    await channel.send(message, parts=PartLog(key="c:1", in_doubt=True))
    [call] = slack.calls_to("chat.postEphemeral")
    assert "metadata" not in call.args and slack.calls_to("conversations.replies") == []
