"""Slack over Socket Mode: the real slack_bolt / slack_sdk clients against the fake Slack."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from adapters.slack import SlackChannel, build
from bot.config import Settings
from bot.errors import ConfigError
from bot.ports import ChannelAdapter
from bot.testing import until
from bot.testing.fake_slack import FakeSlack
from bot.types import Inbound, Outbound, ThreadRef


class Sink:
    """Collects what the adapter delivers."""

    def __init__(self) -> None:
        self.items: list[Inbound] = []
        self._changed = asyncio.Condition()

    async def __call__(self, inbound: Inbound) -> None:
        async with self._changed:
            self.items.append(inbound)
            self._changed.notify_all()

    async def wait(self, count: int, timeout: float = 10.0) -> list[Inbound]:
        async def ready() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.items) >= count)

        await asyncio.wait_for(ready(), timeout)
        return list(self.items)


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(echo_bot_messages=True) as fake:
        yield fake


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def channel(slack: FakeSlack, sink: Sink) -> AsyncIterator[SlackChannel]:
    adapter = SlackChannel(settings=slack.settings())
    await adapter.start(sink)
    yield adapter
    await adapter.stop()


async def test_build_gives_a_channel_adapter(slack: FakeSlack) -> None:
    adapter = build(Settings(slack=slack.settings()))
    assert isinstance(adapter, ChannelAdapter)
    assert adapter.platform == "slack"
    assert adapter.http_routes() == []  # Socket Mode opens no HTTP port


async def test_event_is_delivered_and_acked(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    await slack.wait_connected()
    env = await slack.push_event(slack.app_mention(text="<@U0FANBOT> research django", ts="100.1"))
    ack = await slack.wait_ack(env)
    assert ack == {"envelope_id": env.envelope_id}
    [inbound] = await sink.wait(1)
    assert inbound.text == "research django"
    assert inbound.mentioned and not inbound.is_dm
    assert inbound.thread.account == slack.team_id
    assert (inbound.thread.chat, inbound.thread.thread) == ("C0GENERAL", "100.1")
    assert [c.method for c in slack.calls][:2] == ["auth.test", "apps.connections.open"]


async def test_retry_and_double_delivery_share_one_dedupe_id(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    mention = slack.app_mention(text="<@U0FANBOT> go", ts="200.5")
    first = await slack.push_event(mention)
    await slack.wait_ack(first)
    retry = await slack.redeliver(first, reason="timeout")
    assert retry.body["retry_attempt"] == 1
    as_message = await slack.push_event(slack.message(text="<@U0FANBOT> go", ts="200.5"))
    await slack.wait_ack(retry)
    await slack.wait_ack(as_message)
    items = await sink.wait(3)
    assert {i.dedupe_id for i in items} == {"C0GENERAL:200.5"}
    assert all(i.mentioned for i in items)


async def test_disconnect_refresh_requested_reconnects(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    await slack.wait_connected(1)
    await slack.disconnect("refresh_requested")
    await slack.wait_connected(2)
    env = await slack.push_event(slack.message(text="after refresh", ts="300.1", thread_ts="299.0"))
    await slack.wait_ack(env)
    [inbound] = await sink.wait(1)
    assert inbound.text == "after refresh"
    assert env.connection == 2
    assert len(slack.calls_to("apps.connections.open")) == 2


async def test_dropped_socket_reconnects_and_unacked_event_is_redelivered(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    await slack.wait_connected(1)
    await slack.drop()
    await slack.wait_connected(2)
    env = await slack.push_event(slack.message(text="still here", ts="310.1", thread_ts="309.0"))
    await slack.wait_ack(env)
    [inbound] = await sink.wait(1)
    assert inbound.thread.thread == "309.0"


async def test_own_messages_and_other_events_are_acked_not_delivered(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    own = await slack.push_event(slack.message(text="I said", user="U0FANBOT", bot_id="B0FANBOT"))
    reaction = await slack.push_event({"type": "reaction_added", "user": "U1", "reaction": "+1"})
    joined = await slack.push_event(slack.message(text="joined", subtype="channel_join"))
    edited = await slack.push_event(
        slack.message(text="", subtype="message_changed", message={"text": "x", "ts": "1.0"})
    )
    for env in (own, reaction, joined, edited):
        await slack.wait_ack(env)
    assert sink.items == []


async def test_slash_command_is_channel_level_and_acked(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    env = await slack.push_command(text="list", channel_id="C0OPS")
    await slack.wait_ack(env)
    [inbound] = await sink.wait(1)
    assert inbound.text == "/subagents list"
    assert inbound.thread.thread is None and inbound.thread.chat == "C0OPS"
    assert inbound.mentioned


class DownSink:
    """A sink that refuses everything while ``down`` (like the gateway with Redis down)."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.taken: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        if self.down:
            self.refused += 1
            raise RuntimeError("redis is down")
        self.taken.append(inbound)


async def test_event_is_acked_only_once_the_sink_took_it() -> None:
    async with FakeSlack(ack_timeout=None) as slack:  # no Slack retry: the adapter retries
        sink = DownSink()
        adapter = SlackChannel(settings=slack.settings())
        await adapter.start(sink)
        try:
            env = await slack.push_event(slack.app_mention(text="<@U0FANBOT> hi", ts="400.1"))
            await until(lambda: sink.refused >= 2, timeout=10)  # retried, with back-off
            assert env.ack is None
            sink.down = False
            assert await slack.wait_ack(env) == {"envelope_id": env.envelope_id}
        finally:
            await adapter.stop()
    assert [i.dedupe_id for i in sink.taken] == ["C0GENERAL:400.1"]


async def test_slack_retries_of_a_held_event_join_it_and_all_are_acked() -> None:
    async with FakeSlack(ack_timeout=0.3, retry_delays=(0.0, 0.2)) as slack:
        sink = DownSink()
        adapter = SlackChannel(settings=slack.settings())
        await adapter.start(sink)
        try:
            await slack.push_event(slack.app_mention(text="<@U0FANBOT> hi", ts="410.1"))
            await until(lambda: len(slack.envelopes) == 3, timeout=10)
            assert [e.body["retry_attempt"] for e in slack.envelopes] == [0, 1, 2]
            assert {e.body["retry_reason"] for e in slack.envelopes[1:]} == {"timeout"}
            assert all(e.ack is None for e in slack.envelopes)
            sink.down = False
            for env in slack.envelopes:
                await slack.wait_ack(env)
        finally:
            await adapter.stop()
    assert len(sink.taken) == 1  # one hand-over for the original and both retries


async def test_stop_leaves_held_events_unacked_for_the_next_connection() -> None:
    async with FakeSlack(ack_timeout=None) as slack:
        sink = DownSink()
        first = SlackChannel(settings=slack.settings())
        await first.start(sink)
        env = await slack.push_event(slack.app_mention(text="<@U0FANBOT> hi", ts="420.1"))
        await until(lambda: sink.refused >= 1, timeout=10)
        await first.stop()
        assert env.ack is None
        sink.down = False
        second = SlackChannel(settings=slack.settings())
        await second.start(sink)
        try:
            await until(lambda: len(slack.envelopes) == 2, timeout=10)
            await slack.wait_ack(slack.envelopes[1])
        finally:
            await second.stop()
    assert [i.dedupe_id for i in sink.taken] == ["C0GENERAL:420.1"]


async def test_slash_command_the_sink_failed_on_is_answered_not_lost(slack: FakeSlack) -> None:
    sink = DownSink()
    adapter = SlackChannel(settings=slack.settings())
    await adapter.start(sink)
    try:
        env = await slack.push_command(text="list", channel_id="C0OPS")
        ack = await slack.wait_ack(env)
    finally:
        await adapter.stop()
    # Slack never redelivers a slash command: its author is told to try again.
    assert "try again" in ack["payload"]["text"]
    assert sink.refused == 1


async def test_bad_tokens_are_configuration_errors(slack: FakeSlack, sink: Sink) -> None:
    bad_bot = SlackChannel(settings=slack.settings(bot_token=SecretStr("xoxb-wrong")))
    with pytest.raises(ConfigError, match="BOT_TOKEN"):
        await bad_bot.start(sink)
    bad_app = SlackChannel(settings=slack.settings(app_token=SecretStr("xapp-wrong")))
    with pytest.raises(ConfigError, match="APP_TOKEN"):
        await bad_app.start(sink)


def test_missing_tokens_are_configuration_errors(slack: FakeSlack) -> None:
    with pytest.raises(ConfigError, match="APP_TOKEN"):
        SlackChannel(settings=slack.settings(app_token=None))
    with pytest.raises(ConfigError, match="SIGNING_SECRET"):
        SlackChannel(settings=slack.settings(mode="http", signing_secret=None))


async def test_echo_of_our_own_post_is_acked_and_not_delivered(
    slack: FakeSlack, channel: SlackChannel, sink: Sink
) -> None:
    await slack.wait_connected()
    thread = ThreadRef(platform="slack", account=slack.team_id, chat="C0GENERAL", thread="800.1")
    [ts] = await channel.send(Outbound(thread=thread, text="answer"))
    await until(
        lambda: any(e.body["payload"]["event"]["ts"] == ts for e in slack.envelopes), timeout=10
    )
    [echo] = slack.envelopes
    assert echo.body["payload"]["event"]["bot_id"] == slack.bot_id
    await slack.wait_ack(echo)
    assert sink.items == []
