"""SIGTERM stops ``fanbot gateway`` promptly and says so (issue 30): the Telegram long poll
in flight is cancelled, not waited for, and the stop is logged with how long it took."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram
from bot.testing.stack import GatewayProcess, Stack, hermetic_env

pytestmark = pytest.mark.e2e

HELD_POLL_SECONDS = 30
"""How long the fake holds the gateway's getUpdates: the gateway must be gone well before."""
STOPPED = re.compile(r"stopping: stopped in \d+\.\d\ds")


async def term_and_wait(gateway: GatewayProcess, *, started: str) -> int:
    await Stack.wait_for(lambda: started in gateway.log(), timeout=30)
    os.kill(gateway.pid, signal.SIGTERM)
    await Stack.wait_for(lambda: gateway.returncode() is not None, timeout=HELD_POLL_SECONDS / 2)
    code = gateway.returncode()
    assert code is not None
    return code


async def test_sigterm_cancels_the_held_telegram_long_poll(redis_url: str, tmp_path: Path) -> None:
    async with FakeTelegram() as tg:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "telegram": {
                "bot_token": tg.token, "api_url": tg.api_url, "file_url": tg.file_url,
                "poll_timeout_seconds": HELD_POLL_SECONDS,
            },
            "gateway": {"http_port": 0},
        }  # fmt: skip
        with GatewayProcess(env=hermetic_env(values), log_path=tmp_path / "gw.log") as gateway:
            await Stack.wait_for(lambda: tg.long_polls == 1, timeout=30)
            code = await term_and_wait(gateway, started="adapter telegram started")
            # Gone while the fake still holds its getUpdates: cancelled, not waited for.
            assert tg.long_polls == 1
            log = gateway.log()
    assert code == 0, log
    assert "stopping: telegram polling stopped (offset 0)" in log
    assert STOPPED.search(log), log
    assert tg.token not in log


async def test_sigterm_stops_a_slack_socket_mode_gateway_and_says_so(
    redis_url: str, tmp_path: Path
) -> None:
    async with FakeSlack() as slack:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "slack": {
                "bot_token": slack.bot_token, "app_token": slack.app_token,
                "api_url": slack.api_url,
            },
            "gateway": {"http_port": 0},
        }  # fmt: skip
        with GatewayProcess(env=hermetic_env(values), log_path=tmp_path / "gw.log") as gateway:
            code = await term_and_wait(gateway, started="adapter slack started")
            log = gateway.log()
    assert code == 0, log
    assert STOPPED.search(log), log
