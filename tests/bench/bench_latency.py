"""Benchmark: spawn -> subagent start, and finish -> announce delivered (forked workers).

Run: ``python -m tests.bench.bench_latency [--runs 24] [--workers 4]``. Prints medians and
p95s; not part of the test suite (tests assert behaviour, benchmarks measure speed).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import redis

from bot.keys import Keys
from bot.redis_server import RedisServer
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
    def __init__(self) -> None:
        super().__init__()
        self.delivered_at: dict[str, float] = {}

    async def send(self, message: Outbound) -> list[str]:
        ids = await super().send(message)
        if message.kind is OutboundKind.ANNOUNCE:
            self.delivered_at[message.idempotency_key.removeprefix("announce:")] = time.time()
        return ids


def model(batch: int) -> ScriptedModel:
    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("ok")
        return ToolCalls([Call("sessions_spawn", {"task": f"t{i}"}) for i in range(batch)])

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, Text("done", delay=0.2))
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(runs: int, workers: int, batch: int) -> None:
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
            registry = RunsRegistry(redis=redis.Redis.from_url(server.url), keys=Keys())
            ids = [i.decode() for i in registry.redis.zrange(Keys().all_runs, 0, -1)]  # type: ignore[union-attr]
            records = registry.get_many(ids)
            start = [(r.started_at or 0) - r.created_at for r in records]
            announce = [channel.delivered_at[r.run_id] - (r.ended_at or 0) for r in records]
            registry.redis.close()
        finally:
            server.stop()
    for name, values_ in (
        ("spawn -> subagent start", start),
        ("finish -> announce delivered", announce),
    ):
        print(
            f"{name:30s} n={len(values_)} median={statistics.median(values_) * 1000:.0f} ms "
            f"p95={pct(values_, 0.95) * 1000:.0f} ms max={max(values_) * 1000:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=3, help="spawns per message")
    args = parser.parse_args()
    asyncio.run(run(args.runs, args.workers, args.batch))


if __name__ == "__main__":
    main()
