"""Shared pieces of the Telegram integration tests: the fake, a channel, a recording sink."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.telegram.channel import TelegramChannel
from bot.testing.fake_telegram import FakeTelegram
from bot.types import Inbound


class Sink:
    """Collects inbounds; ``wait(n)`` returns once ``n`` arrived."""

    def __init__(self) -> None:
        self.items: list[Inbound] = []
        self._changed = asyncio.Event()

    async def __call__(self, inbound: Inbound) -> None:
        self.items.append(inbound)
        self._changed.set()

    async def wait(self, count: int, timeout: float = 10.0) -> list[Inbound]:
        async with asyncio.timeout(timeout):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items


def channel_for(tg: FakeTelegram, **kwargs: Any) -> TelegramChannel:
    return TelegramChannel(
        token=tg.token, api_url=tg.api_url, file_url=tg.file_url, poll_timeout=5, **kwargs
    )


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def polling(tg: FakeTelegram, sink: Sink) -> AsyncIterator[TelegramChannel]:
    channel = channel_for(tg)
    await channel.start(sink)
    yield channel
    await channel.stop()
