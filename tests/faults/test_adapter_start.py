"""One platform that cannot be reached at start never stops the others, and joins later.

The real gateway (in-process) with forked workers serves Slack (the fake) and Telegram,
whose Bot API is off the network when the gateway starts: Slack messages get their turns
while Telegram is retried with back-off; once the Telegram fake listens again on the same
port, Telegram works too, without a restart. An announce written for Telegram while it
is down waits for it (it does not spend its retries and end in the dead-letter stream).
"""

from __future__ import annotations

import logging
import re

import pytest

from bot.cli.wiring import build_adapters
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import ChatRequest, ScriptedModel, Text
from bot.testing.stack import Stack
from bot.types import Outbound, OutboundKind, ThreadRef
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

FORUM = forum()


def echo(request: ChatRequest) -> Text:
    return Text(f"echo: {request.last_user_message.partition(': ')[2]}")


async def test_telegram_down_at_start_slack_serves_then_telegram_joins(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with (
        FakeOpenAI(ScriptedModel(default=echo)) as model,
        FakeSlack() as slack,
        FakeTelegram() as tg,
    ):
        tg.add_topic(FORUM, 7)
        await tg.pause()  # connection refused on its port until resume()
        values = stack_values(
            redis_url,
            model.base_url,
            slack={
                "bot_token": slack.bot_token,
                "app_token": slack.app_token,
                "api_url": slack.api_url,
                "socket_ping_interval": 1.0,
            },
            telegram={
                "bot_token": tg.token,
                "api_url": tg.api_url,
                "file_url": tg.file_url,
                "poll_timeout_seconds": 1,
            },
        )
        values["gateway"] |= {"delivery_attempts": 2, "delivery_backoff_seconds": 0.1}
        adapters = build_adapters(Settings(**values))
        async with Stack(values=values, adapters=adapters, workers=1) as stack:
            await slack.wait_connected()
            await slack.push_event(slack.app_mention(text="<@U0FANBOT> hello slack"))
            await stack.wait_for(
                lambda: any(m.text == "echo: hello slack" for m in slack.messages), timeout=30
            )
            assert not tg.calls_to("getUpdates")  # Telegram is not running yet
            retry = re.compile(
                rf"telegram: cannot reach {re.escape(tg.api_url)} \(connection refused\); "
                r"retrying in \d+s"
            )
            assert any(retry.fullmatch(r.getMessage()) for r in caplog.records), caplog.text
            assert stack.gateway is not None
            deps = stack.gateway.deps
            topic = ThreadRef(
                platform="telegram", account=str(tg.bot_id), chat=str(FORUM["id"]), thread="7"
            )
            early = Outbound(thread=topic, text="written while Telegram was down",
                             kind=OutboundKind.ANNOUNCE, idempotency_key="announce:early")  # fmt: skip
            deps.outbox.put(early)
            await stack.wait_for(lambda: deps.redis.xlen(deps.keys.outbox) >= 1, timeout=5)

            await tg.resume()
            await stack.wait_for(lambda: bool(tg.calls_to("getUpdates")), timeout=40)
            tg.push(tg.message(chat=FORUM, text="@fanbot_bot hello telegram", thread_id=7))
            await stack.wait_for(
                lambda: any(m.text == "echo: hello telegram" for m in tg.messages), timeout=30
            )
            await stack.wait_for(lambda: any(m.text == early.text for m in tg.messages), timeout=30)
            assert deps.redis.xlen(deps.keys.dead_letter) == 0
            await slack.push_event(slack.app_mention(text="<@U0FANBOT> still here"))
            await stack.wait_for(
                lambda: any(m.text == "echo: still here" for m in slack.messages), timeout=30
            )
    assert sum(m.text == early.text for m in tg.messages) == 1
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("adapter ")]
    assert started == ["adapter slack started", "adapter telegram started"]
    assert "Traceback" not in caplog.text
