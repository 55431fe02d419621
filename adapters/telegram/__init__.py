"""Telegram channel: forum topics as sessions, long polling or webhook (python-telegram-bot)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.config import Settings
from bot.errors import ConfigError

if TYPE_CHECKING:
    from adapters.telegram.channel import TelegramChannel

__all__ = ["build"]


def build(settings: Settings) -> TelegramChannel:
    """The Telegram adapter for ``settings.telegram`` (which must be configured)."""
    from adapters.telegram.channel import TelegramChannel

    tg = settings.telegram
    if tg.bot_token is None:
        raise ConfigError("FANBOT_TELEGRAM__BOT_TOKEN is not set")
    return TelegramChannel(
        token=tg.bot_token.get_secret_value(),
        api_url=tg.api_url,
        file_url=tg.file_url,
        webhook_url=tg.webhook_url,
        webhook_secret=tg.webhook_secret.get_secret_value() if tg.webhook_secret else None,
        poll_timeout=tg.poll_timeout_seconds,
        attachments=settings.attachments,
    )
