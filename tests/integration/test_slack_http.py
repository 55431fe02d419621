"""Slack HTTP Events mode: signed deliveries through the adapter's aiohttp route."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest
from aiohttp import web

from adapters.slack import SlackChannel
from bot.testing import slack_wire as wire
from bot.testing import until
from bot.testing.fake_slack import FakeSlack
from bot.testing.netutil import LOOPBACK, bind_loopback
from bot.types import Inbound
from tests.integration.slack_support import Served, serve, served, slack

__all__ = ["served", "slack"]  # fixtures


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


# -- bad input: a clean 401/400, one throttled line, no traceback, the next request works --


async def post_raw(url: str, raw: bytes, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=raw, headers=headers) as r,
    ):
        return r.status


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert loud == [], [r.getMessage() for r in loud]


async def a_good_request_still_works(slack: FakeSlack, served: Served) -> None:
    ts = wire.new_ts()
    body = slack.event_body(slack.app_mention(text="<@U0FANBOT> still there?", ts=ts))
    assert (await slack.deliver_http(served.url, body)).status == 200
    assert served.inbox[-1].message_id == ts


def unsigned(timestamp: str | None) -> dict[str, str]:
    headers = {"X-Slack-Signature": "v0=" + "0" * 64, "Content-Type": "application/json"}
    if timestamp is not None:
        headers["X-Slack-Request-Timestamp"] = timestamp
    return headers


@pytest.mark.parametrize(
    ("raw", "headers"),
    [
        (b"{}", unsigned(None)),
        (b"{}", unsigned("")),
        (b"{}", unsigned("yesterday")),
        (b"{}", unsigned("1" * 5000)),  # int() of it would raise, not just mismatch
        (b"{}", unsigned("\u0661\u0662")),  # Unicode digits: isdigit(), but not a timestamp
        (b"\xff\xfe{not utf-8", unsigned(str(int(time.time())))),
    ],
    ids=["no-timestamp", "empty-timestamp", "word", "huge", "arabic-digits", "not-utf8"],
)
async def test_unauthenticated_junk_is_401_without_traceback(
    slack: FakeSlack,
    served: Served,
    caplog: pytest.LogCaptureFixture,
    raw: bytes,
    headers: dict[str, str],
) -> None:
    caplog.set_level(logging.INFO)
    assert await post_raw(served.url, raw, headers) == 401
    no_traceback(caplog)
    assert served.inbox == []
    await a_good_request_still_works(slack, served)


def deep_json(depth: int) -> str:
    return '{"type": "event_callback", "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(
    ("raw", "ctype"),
    [
        (b"\xff\xfe{}", "application/json"),
        (deep_json(100_000).encode(), "application/json"),  # RecursionError in json
        (deep_json(500).encode(), "application/json"),  # parses, but deeper than Slack's
        (b'{"type": "event_callback", "event": "a string"}', "application/json"),
        (b'{"type": "event_callback", "event": {"type": 7}}', "application/json"),
        (b'{"type": "event_callback", "authorizations": "x"}', "application/json"),
        (b'{"type": ["event_callback"]}', "application/json"),
        (b"payload=" + b"%5B" * 5000, "application/x-www-form-urlencoded"),
        (b"[1, 2]", "application/json"),
    ],
    ids=[
        "not-utf8", "recursion", "too-deep", "event-string", "event-type-int",
        "authorizations-string", "type-list", "form-payload-deep", "array",
    ],
)  # fmt: skip
async def test_signed_but_malformed_body_is_400_without_traceback(
    slack: FakeSlack,
    served: Served,
    caplog: pytest.LogCaptureFixture,
    raw: bytes,
    ctype: str,
) -> None:
    caplog.set_level(logging.INFO)
    headers = slack.sign(raw) | {"Content-Type": ctype}
    assert await post_raw(served.url, raw, headers) == 400
    no_traceback(caplog)
    assert served.inbox == []
    await a_good_request_still_works(slack, served)


async def test_a_flood_of_forged_requests_logs_one_line(
    slack: FakeSlack, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = slack.event_body(slack.app_mention(text="<@U0FANBOT> x"))
    for _ in range(50):
        result = await slack.deliver_http(served.url, body, secret="not-the-secret")
        assert result.status == 401
    ours = [r for r in caplog.records if r.name.startswith("adapters.slack")]
    assert len(ours) == 1 and ours[0].levelno == logging.WARNING
    no_traceback(caplog)
    await a_good_request_still_works(slack, served)


# -- the sink refusing (Redis down): 503, held and retried, never confirmed early ----------


async def test_event_the_sink_refused_is_503_then_taken_by_the_adapters_retries() -> None:
    async with FakeSlack(ack_timeout=None) as slack:
        sink = Refusing()
        async with serve(slack, sink) as (_, url):
            body = slack.event_body(slack.app_mention(text="<@U0FANBOT> hi", ts="700.1"))
            first = await slack.deliver_http(url, body)
            assert first.status == 503  # not confirmed: Slack will retry
            sink.down = False
            await until(lambda: len(sink.taken) == 1, timeout=10)  # the adapter kept trying
            retry = await slack.deliver_http(url, body, retry_num=1)
            assert retry.status == 200
    assert sink.refused >= 2  # the first try and at least one of the adapter's retries
    assert {i.dedupe_id for i in sink.taken} == {"C0GENERAL:700.1"}


async def test_events_api_retries_reach_a_sink_that_came_back() -> None:
    async with FakeSlack(ack_timeout=3.0, retry_delays=(0.0, 0.5, 0.5)) as slack:
        sink = Refusing()
        async with serve(slack, sink) as (_, url):
            body = slack.event_body(slack.app_mention(text="<@U0FANBOT> hi", ts="710.1"))
            delivery = asyncio.create_task(slack.deliver_http_retrying(url, body))
            await until(lambda: slack.http_deliveries, timeout=10)
            sink.down = False
            results = await delivery
    assert [r.status for r in results] == [503, 200]
    assert [i.dedupe_id for i in sink.taken][:1] == ["C0GENERAL:710.1"]


class Refusing:
    """A sink that refuses while ``down`` (the gateway with Redis down)."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.taken: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        if self.down:
            self.refused += 1
            raise RuntimeError("redis is down")
        self.taken.append(inbound)
