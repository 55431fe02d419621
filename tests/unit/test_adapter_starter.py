"""Each adapter starts on its own: a failing one is retried with back-off, the others serve."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
import httpx
import pytest
from aiohttp import web

from bot.errors import ConfigError
from bot.gateway.starter import AdapterStarter, describe_failure
from bot.ports import ChannelAdapter
from bot.types import Inbound


class Flaky:
    """An adapter whose ``start`` raises the next of ``failures`` until they run out."""

    def __init__(self, platform: str, *failures: Exception) -> None:
        self.platform = platform
        self.failures = list(failures)
        self.attempts = 0
        self.stops = 0
        self.running = False

    async def start(self, sink: object) -> None:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.running = True

    async def stop(self) -> None:
        self.stops += 1
        self.running = False

    def http_routes(self) -> list[web.RouteDef]:
        return []


async def sink(inbound: Inbound) -> None:
    return None


def starter(started: list[str], **kw: float) -> AdapterStarter:
    return AdapterStarter(
        sink=sink,
        urls={"telegram": "http://127.0.0.1:9/bot"},
        on_started=lambda a: started.append(a.platform),
        **kw,
    )


def adapters(*items: Flaky) -> list[ChannelAdapter]:
    return list(items)  # type: ignore[arg-type]


def refused() -> Exception:
    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except OSError as exc:
            raise httpx.ConnectError("All connection attempts failed") from exc
    except httpx.ConnectError as exc:
        wrapped = RuntimeError("httpx.ConnectError: All connection attempts failed")
        wrapped.__cause__ = exc
        return wrapped


async def test_one_platform_down_never_stops_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "bot.gateway.starter")
    started: list[str] = []
    slack, telegram = Flaky("slack"), Flaky("telegram", refused(), refused(), refused())
    s = starter(started, base=0.01, cap=0.04)
    await s.start_all(adapters(slack, telegram))
    assert slack.running and started == ["slack"] and s.retrying == ["telegram"]
    for _ in range(200):
        if telegram.running:
            break
        await asyncio.sleep(0.01)
    assert telegram.running and started == ["slack", "telegram"] and s.retrying == []
    assert telegram.attempts == 4 and telegram.stops == 3  # each half start released
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines
        == [
            "telegram: cannot reach http://127.0.0.1:9/bot (connection refused); retrying in 0s",
        ]
        * 3
    )
    await s.cancel()


async def test_the_delay_doubles_to_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "bot.gateway.starter")
    telegram = Flaky("telegram", *[refused() for _ in range(7)])
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    s = starter([], base=1.0, cap=60.0)
    s.sleep = fake_sleep
    await s.start_all(adapters(telegram))
    for _ in range(100):
        if telegram.running:
            break
        await asyncio.sleep(0)
    assert telegram.running and sleeps == [1, 2, 4, 8, 16, 32, 60]
    assert caplog.records[2].getMessage().endswith("; retrying in 4s")
    await s.cancel()


async def test_a_configuration_error_is_not_retried_unless_nothing_else_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started: list[str] = []
    bad = Flaky("slack", ConfigError("Slack rejected FANBOT_SLACK__BOT_TOKEN (auth.test)"))
    good = Flaky("telegram")
    s = starter(started)
    await s.start_all(adapters(bad, good))
    assert started == ["telegram"] and s.retrying == [] and bad.attempts == 1
    assert "slack: Slack rejected FANBOT_SLACK__BOT_TOKEN (auth.test); not retrying" in caplog.text

    alone = Flaky("slack", ConfigError("Slack rejected FANBOT_SLACK__BOT_TOKEN (auth.test)"))
    with pytest.raises(ConfigError, match=r"^slack: Slack rejected FANBOT_SLACK__BOT_TOKEN"):
        await starter([]).start_all(adapters(alone))


async def test_cancel_stops_the_retries() -> None:
    telegram = Flaky("telegram", *[refused() for _ in range(100)])
    s = starter([], base=0.01, cap=0.01)
    await s.start_all(adapters(telegram))
    await asyncio.sleep(0.05)
    await s.cancel()
    attempts = telegram.attempts
    await asyncio.sleep(0.05)
    assert telegram.attempts == attempts and s.retrying == []


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (refused(), "telegram: cannot reach http://h/bot (connection refused)"),
        (
            aiohttp.ClientConnectorError(
                aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
                OSError(111, "refused"),
            ),
            "telegram: cannot reach http://h/bot (connection refused)",
        ),
        (TimeoutError(), "telegram: cannot reach http://h/bot (TimeoutError)"),
        (
            aiohttp.ClientConnectorDNSError(
                aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
                socket.gaierror(-2, "Name or service not known"),
            ),
            "telegram: cannot reach http://h/bot (DNS lookup failed: Name or service not known)",
        ),
        (
            aiohttp.ClientConnectorError(
                aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
                OSError(113, "No route to host"),
            ),
            "telegram: cannot reach http://h/bot (ClientConnectorError)",
        ),
        (
            RuntimeError("token\nrejected " + "x" * 500),
            "telegram: cannot start: RuntimeError: token rejected " + "x" * 184 + "…",
        ),
    ],
)
def test_describe_failure(exc: Exception, expected: str) -> None:
    assert describe_failure("telegram", "http://h/bot", exc) == expected
