"""Composition: settings -> TelegramChannel, and the Telegram settings' own checks."""

from __future__ import annotations

import pytest

from adapters.telegram import build
from adapters.telegram.channel import TelegramChannel
from bot.config import Settings
from bot.errors import ConfigError
from bot.ports import ChannelAdapter


def test_build_from_settings_is_a_channel_adapter() -> None:
    settings = Settings(telegram={"bot_token": "1:x", "api_url": "http://127.0.0.1:9/bot"})
    channel = build(settings)
    assert isinstance(channel, TelegramChannel) and isinstance(channel, ChannelAdapter)
    assert channel.mode == "polling" and channel.http_routes() == []


def test_webhook_mode_serves_the_url_path() -> None:
    settings = Settings(
        telegram={
            "bot_token": "1:x",
            "webhook_url": "https://bot.example.org/hooks/telegram",
            "webhook_secret": "abc_DEF-1",
        }
    )
    channel = build(settings)
    assert channel.mode == "webhook"
    assert [(r.method, r.path) for r in channel.http_routes()] == [("POST", "/hooks/telegram")]


def test_build_without_token_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="BOT_TOKEN"):
        build(Settings())


@pytest.mark.parametrize(
    "telegram",
    [
        {"webhook_url": "https://x.org/hook"},  # no secret: anyone could post updates
        {"webhook_url": "https://x.org/hook", "webhook_secret": "has space"},
        {"webhook_secret": "x" * 257},
        {"poll_timeout_seconds": 90},
    ],
)
def test_invalid_telegram_settings_are_rejected(telegram: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Settings(telegram={"bot_token": "1:x", **telegram})


def test_continue_threads_is_off_for_telegram() -> None:
    assert Settings().telegram.continue_threads is False
