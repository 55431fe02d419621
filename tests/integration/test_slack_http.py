"""Slack HTTP Events mode: signed deliveries through the adapter's aiohttp route."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from adapters.slack import SlackChannel
from bot.testing.fake_slack import FakeSlack
from bot.testing.netutil import LOOPBACK, bind_loopback
from bot.types import Inbound


@dataclass
class Served:
    adapter: SlackChannel
    url: str
    inbox: list[Inbound]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def served(slack: FakeSlack) -> AsyncIterator[Served]:
    inbox: list[Inbound] = []

    async def sink(inbound: Inbound) -> None:
        inbox.append(inbound)

    adapter = SlackChannel(settings=slack.settings(mode="http", app_token=None))
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_loopback()
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    await adapter.start(sink)
    try:
        yield Served(adapter, f"http://{LOOPBACK}:{port}/slack/events", inbox)
    finally:
        await adapter.stop()
        await runner.cleanup()


async def test_signed_event_is_delivered(slack: FakeSlack, served: Served) -> None:
    body = slack.event_body(slack.app_mention(text="<@U0FANBOT> hello", ts="500.1"))
    result = await slack.deliver_http(served.url, body)
    assert result.status == 200
    [inbound] = served.inbox
    assert inbound.text == "hello" and inbound.thread.thread == "500.1"
    assert slack.connections == 0 and not slack.calls_to("apps.connections.open")


async def test_retried_delivery_has_the_same_dedupe_id(slack: FakeSlack, served: Served) -> None:
    body = slack.event_body(slack.message(text="<@U0FANBOT> again", ts="501.1"))
    first = await slack.deliver_http(served.url, body)
    retry = await slack.deliver_http(served.url, body, retry_num=1)
    assert (first.status, retry.status) == (200, 200)
    assert [i.dedupe_id for i in served.inbox] == ["C0GENERAL:501.1"] * 2


async def test_url_verification_is_answered(slack: FakeSlack, served: Served) -> None:
    body = {"token": "t", "challenge": "ch4ll3nge", "type": "url_verification"}
    result = await slack.deliver_http(served.url, body)
    assert result.status == 200
    assert json.loads(result.text) == {"challenge": "ch4ll3nge"}
    assert served.inbox == []


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("forged", 401),
        ("stale", 401),
        ("future", 401),
        ("missing_signature", 401),
        ("malformed_json", 400),
        ("json_array", 400),
        ("empty", 400),
    ],
)
async def test_rejected_requests_reach_nothing(
    slack: FakeSlack, served: Served, how: str, status: int
) -> None:
    body: dict[str, object] | str = slack.event_body(slack.app_mention(text="<@U0FANBOT> x"))
    kwargs: dict[str, object] = {}
    if how == "forged":
        kwargs["secret"] = "not-the-secret"
    elif how == "stale":
        kwargs["timestamp"] = int(time.time()) - 600
    elif how == "future":
        kwargs["timestamp"] = int(time.time()) + 600
    elif how == "missing_signature":
        kwargs["signature"] = ""
    elif how == "malformed_json":
        body = '{"type": "event_callback", "event": {'
    elif how == "json_array":
        body = "[1, 2, 3]"
    else:
        body = ""
    result = await slack.deliver_http(served.url, body, **kwargs)  # type: ignore[arg-type]
    assert result.status == status
    assert served.inbox == []


async def test_slash_command_over_http(slack: FakeSlack, served: Served) -> None:
    fields = slack.command_body(text="info 2", channel_id="C0OPS")
    result = await slack.deliver_http(served.url, fields, form=True)
    assert result.status == 200
    [inbound] = served.inbox
    assert inbound.text == "/subagents info 2"
    assert inbound.thread.thread is None and inbound.thread.chat == "C0OPS"


async def test_route_answers_503_before_start(slack: FakeSlack) -> None:
    adapter = SlackChannel(settings=slack.settings(mode="http", app_token=None))
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_loopback()
    await web.SockSite(runner, sock).start()
    try:
        url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/slack/events"
        result = await slack.deliver_http(url, slack.event_body(slack.message(text="x")))
        assert result.status == 503
    finally:
        await runner.cleanup()
