"""A Matrix homeserver that cannot be reached (its name does not resolve, its port refuses)
is said in one line of fanbot's own, with the reason and the retry, never nio's
"Timed out, sleeping for 0s" (issue 30)."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest
from pydantic import SecretStr

from adapters.matrix.channel import MatrixChannel
from adapters.matrix.login import make_client
from adapters.matrix.state import SessionState
from bot.config import MatrixSettings
from bot.gateway.starter import AdapterStarter
from bot.testing.netutil import free_port
from bot.types import Inbound

NIO_LINE = "sleeping for"
UNRESOLVABLE = "https://nonexistent.invalid"


REFUSED = "refused"
"""Stands for a loopback port nothing listens on, picked when the test runs (an id that
is the same in every xdist worker)."""


def where(homeserver: str) -> str:
    return f"http://127.0.0.1:{free_port()}" if homeserver == REFUSED else homeserver


def channel(homeserver: str, store: Path) -> MatrixChannel:
    settings = MatrixSettings(
        homeserver=homeserver, user_id="@fanbot:example.org", password=SecretStr("pw")
    )
    return MatrixChannel(settings=settings, store_path=store)


async def sink(inbound: Inbound) -> None:
    return None


async def lines(caplog: pytest.LogCaptureFixture, pattern: str, count: int = 1) -> list[str]:
    async def seen() -> list[str]:
        while True:
            found = [r.getMessage() for r in caplog.records if re.search(pattern, r.getMessage())]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(seen(), timeout=30)


@pytest.mark.parametrize(
    ("homeserver", "reason"),
    [
        (UNRESOLVABLE, r"DNS lookup failed: [^)]+"),
        (REFUSED, r"connection refused"),
    ],
)
async def test_an_unreachable_homeserver_at_start_is_one_line_per_try(
    homeserver: str, reason: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    homeserver = where(homeserver)
    matrix = channel(homeserver, tmp_path)
    starter = AdapterStarter(
        sink=sink, urls={"matrix": homeserver}, on_started=lambda _: None, base=0.05, cap=0.05
    )
    try:
        await starter.start_all([matrix])
        found = await lines(caplog, r"^matrix: cannot reach", count=3)
    finally:
        await starter.cancel()
        await matrix.stop()
    expected = rf"matrix: cannot reach {re.escape(homeserver)} \({reason}\); retrying in 0s"
    assert all(re.fullmatch(expected, line) for line in found), found
    assert NIO_LINE not in caplog.text
    assert starter.retrying == []


@pytest.mark.parametrize(
    ("homeserver", "reason"),
    [
        (UNRESOLVABLE, r"DNS lookup failed: [^)]+"),
        (REFUSED, r"connection refused"),
    ],
)
async def test_a_homeserver_lost_while_syncing_is_one_line_per_try(
    homeserver: str, reason: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    homeserver = where(homeserver)
    matrix = channel(homeserver, tmp_path)
    # As after a start: logged in, a sync token saved; then the server is gone.
    client = matrix._client = make_client(matrix.settings, tmp_path)
    client.restore_login("@fanbot:example.org", "DEV", "token")
    matrix._session = SessionState(
        homeserver=homeserver, user_id="@fanbot:example.org", device_id="DEV", next_batch="s1"
    )
    matrix._sink = sink
    matrix._task = asyncio.create_task(matrix._sync_forever())
    try:
        found = await lines(caplog, r"^matrix: cannot reach")
    finally:
        await matrix.stop()
    assert re.fullmatch(
        rf"matrix: cannot reach {re.escape(homeserver)} \({reason}\); retrying in \ds", found[0]
    ), found
    assert NIO_LINE not in caplog.text
