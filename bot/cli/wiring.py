"""The composition root: which adapters exist, built lazily from settings by dotted name.

Only this module (and the CLI) knows the adapter packages; the core never imports them.
"""

from __future__ import annotations

import importlib
from typing import cast

from bot.config import Settings
from bot.ports import ChannelAdapter

PLATFORMS = ("slack", "telegram", "matrix")


def configured_platforms(settings: Settings) -> list[str]:
    return [p for p in PLATFORMS if getattr(settings, p).configured]


def build_adapters(settings: Settings) -> list[ChannelAdapter]:
    """An adapter for every platform whose credentials are present."""
    adapters: list[ChannelAdapter] = []
    for platform in configured_platforms(settings):
        module = importlib.import_module(f"adapters.{platform}")
        adapters.append(cast(ChannelAdapter, module.build(settings)))
    return adapters
