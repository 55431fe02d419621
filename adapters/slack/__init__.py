"""Slack channel: threads as sessions over Socket Mode or signed HTTP events (slack-bolt).

The gateway imports this package only when ``settings.slack.configured`` is true.
"""

from __future__ import annotations

from adapters.slack.channel import SlackChannel
from bot.config import Settings

__all__ = ["SlackChannel", "build"]


def build(settings: Settings) -> SlackChannel:
    """Create the Slack adapter from settings (raises ConfigError on missing tokens)."""
    return SlackChannel(settings=settings.slack, attachments=settings.attachments)
