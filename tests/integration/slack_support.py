"""A Slack adapter in HTTP Events mode served on a loopback port, against the fake Slack
(shared by the HTTP tests and the lifecycle tests)."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
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

    async def post(self, slack: FakeSlack, body: dict[str, Any], *, form: bool = False) -> int:
        """POST ``body`` signed (as JSON, or as an interactivity form); the HTTP status."""
        if form:
            raw = urllib.parse.urlencode({"payload": json.dumps(body)}).encode()
            ctype = "application/x-www-form-urlencoded"
        else:
            raw, ctype = json.dumps(body).encode(), "application/json"
        headers = slack.sign(raw) | {"Content-Type": ctype}
        async with aiohttp.ClientSession() as s, s.post(self.url, data=raw, headers=headers) as r:
            return r.status


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@contextlib.asynccontextmanager
async def serve(
    slack: FakeSlack, sink: Callable[[Inbound], Awaitable[None]]
) -> AsyncIterator[tuple[SlackChannel, str]]:
    """The adapter in HTTP mode behind a loopback aiohttp server; it and its events URL."""
    adapter = SlackChannel(settings=slack.settings(mode="http", app_token=None))
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_loopback()
    await web.SockSite(runner, sock).start()
    await adapter.start(sink)
    try:
        yield adapter, f"http://{LOOPBACK}:{sock.getsockname()[1]}/slack/events"
    finally:
        await adapter.stop()
        await runner.cleanup()


@pytest.fixture
async def served(slack: FakeSlack) -> AsyncIterator[Served]:
    inbox: list[Inbound] = []

    async def sink(inbound: Inbound) -> None:
        inbox.append(inbound)

    async with serve(slack, sink) as (adapter, url):
        yield Served(adapter, url, inbox)
