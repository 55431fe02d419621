"""Latency benchmark: spawn -> subagent start, and finish -> announce delivered.

The gateway runs in this process (:class:`~bot.testing.stack.Stack`) with a
:class:`~bot.testing.channel.MemoryChannel` that stamps each announce's arrival; the
subagents run on forked workers against the fake model (0.2 s per answer).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import redis

from bot.bench.stats import summary
from bot.keys import Keys
from bot.ports import PartLog
from bot.redis.server import RedisServer
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import Outbound, OutboundKind


class TimedChannel(MemoryChannel):
    """A memory channel that records when each run's announce was delivered."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered_at: dict[str, float] = {}

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        ids = await super().send(message, parts=parts)
        if message.kind is OutboundKind.ANNOUNCE:
            self.delivered_at[message.run_id] = time.time()
        return ids


def model(batch: int) -> ScriptedModel:
    """Each message spawns ``batch`` subagents; each subagent answers after 0.2 s."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("ok")
        return ToolCalls([Call("sessions_spawn", {"task": f"t{i}"}) for i in range(batch)])

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, Text("done", delay=0.2))
    )


async def run_latency(*, runs: int = 24, workers: int = 4, batch: int = 3) -> list[str]:
    """Run the benchmark; returns the summary lines (median, p95, max per measure)."""
    with tempfile.TemporaryDirectory(prefix="fb-bench-") as tmp:
        server = RedisServer(data_dir=Path(tmp) / "r").start()
        try:
            async with FakeOpenAI(model(batch), models=["fake-model"]) as fake:
                values = {
                    "redis_url": server.url,
                    "openai": {"base_url": fake.base_url, "model": "fake-model"},
                    "gateway": {"progress_edit_seconds": 1},
                }
                channel = TimedChannel()
                async with Stack(values=values, adapters=[channel], workers=workers) as stack:
                    await asyncio.sleep(3)  # let the workers finish importing
                    for i in range(runs // batch):
                        await channel.say(f"go {i}", thread=channel.thread(f"t{i}"))
                    await stack.wait_for(lambda: len(channel.delivered_at) >= runs, timeout=300)
            client = redis.Redis.from_url(server.url)
            records = RunsRegistry(redis=client, keys=Keys()).all()
            start = [(r.started_at or 0) - r.created_at for r in records]
            announce = [channel.delivered_at[r.run_id] - (r.ended_at or 0) for r in records]
            client.close()
        finally:
            server.stop()
    return [
        summary("spawn -> subagent start", start),
        summary("finish -> announce delivered", announce),
    ]
