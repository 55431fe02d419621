"""Announces survive the gateway: written while it is down or stuck, delivered exactly once."""

from __future__ import annotations

import asyncio

import redis

from bot.keys import Keys
from bot.ports import PartLog
from bot.store.runs import RunsRegistry
from bot.testing import until
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.stack import Stack
from bot.types import Outbound, OutboundKind
from tests.e2e.conftest import stack_values
from tests.e2e.test_fanout import main_turn


def terminal_runs(stack: Stack) -> int:
    """Runs in Redis that reached a terminal status (their announce is in the outbox)."""
    client = redis.Redis.from_url(stack.settings.redis_url)
    try:
        runs = RunsRegistry(redis=client, keys=Keys(prefix=stack.settings.key_prefix)).all()
    finally:
        client.close()
    return sum(run.status.terminal for run in runs)


class StuckChannel(MemoryChannel):
    """Accepts replies but never returns from sending an announce (a gateway about to die)."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = 0

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        if message.kind is OutboundKind.ANNOUNCE:
            self.stuck += 1
            await asyncio.Event().wait()
        return await super().send(message, parts=parts)


async def test_announce_read_but_not_acked_is_delivered_once_by_the_next_gateway(
    redis_url: str,
) -> None:
    async with FakeOpenAI(main_turn(1), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url)
        stuck = StuckChannel()
        stack = Stack(values=values, adapters=[stuck], workers=2)
        async with stack:
            await stuck.say("one thing")
            await stack.wait_for(lambda: stuck.stuck == 1, timeout=40)
            await stack.stop_gateway()  # dies holding the entry unacknowledged
            fresh = MemoryChannel()
            stack.adapters = [fresh]
            await stack.start_gateway()
            await stack.wait_for(lambda: len(fresh.announces) == 1, timeout=30)
            # Once every entry is acknowledged nothing is left to reclaim: no second copy.
            assert stack.gateway is not None
            await stack.wait_for(stack.gateway.egress.drained, timeout=10)
            assert len(fresh.announces) == 1


async def test_announces_written_while_the_gateway_is_down_arrive_after_restart(
    redis_url: str,
) -> None:
    async with FakeOpenAI(main_turn(3), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url)
        channel = MemoryChannel()
        stack = Stack(values=values, adapters=[channel], workers=3)
        async with stack:
            await channel.say("three things")
            await stack.wait_for(lambda: len(channel.replies) == 1, timeout=30)
            await stack.stop_gateway()
            # The subagents (1 s each) finish, and write their announces, with no gateway.
            await until(lambda: terminal_runs(stack) == 3, timeout=30)
            assert channel.announces == []
            await stack.start_gateway()
            await stack.wait_for(lambda: len(channel.announces) == 3, timeout=30)
            assert stack.gateway is not None
            await stack.wait_for(stack.gateway.egress.drained, timeout=10)
    assert len(channel.announces) == 3
    assert len({a.idempotency_key for a in channel.announces}) == 3
