"""Stop latency against forked workers: ``python -m tests.bench.bench_stop [stops]``.

Each stop hits a run that is in the middle of a long model call (the fake model hangs).
Measured from the ``/subagents stop`` message entering the gateway to (a) the run's status
being ``stopped`` in Redis and (b) its announce being delivered to the channel. Targets
(issue 6): under 1 s and under 2 s. Not run in CI.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bot.redis_server import RedisServer
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Hang
from bot.testing.stack import Stack
from bot.types import RunStatus
from tests.e2e.conftest import stack_values
from tests.e2e.test_control_stop import fanout_model, runs_of

WAVE = 4


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{name:<28} n={len(samples):<3} median {statistics.median(samples) * 1000:7.1f} ms"
        f"   p95 {p95 * 1000:7.1f} ms   max {ordered[-1] * 1000:7.1f} ms"
    )


async def bench(url: str, stops: int) -> tuple[list[float], list[float]]:
    to_stopped: list[float] = []
    to_announce: list[float] = []
    async with FakeOpenAI(fanout_model(lambda _: Hang(120)), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=WAVE + 1) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps
            wave = 0
            while len(to_stopped) < stops:
                wave += 1
                thread = channel.thread(f"w{wave}")
                labels = [f"r{wave}x{i}" for i in range(WAVE)]
                await channel.say("spawn " + " ".join(labels), thread=thread, user="alice")
                await stack.wait_for(
                    lambda t=thread: (
                        len(runs_of(deps, t)) == WAVE
                        and all(r.status is RunStatus.RUNNING for r in runs_of(deps, t).values())
                        and sum(r.outcome == "in_flight" for r in fake.requests) >= WAVE
                    ),
                    timeout=30,
                )
                for label, run in runs_of(deps, thread).items():
                    before = len(channel.announces)
                    t0 = time.perf_counter()
                    await channel.say(
                        f"/subagents stop {run.run_id[:8]}", thread=thread, user="alice"
                    )
                    while deps.runs.get(run.run_id).status is not RunStatus.STOPPED:  # type: ignore[union-attr]
                        await asyncio.sleep(0.001)
                    to_stopped.append(time.perf_counter() - t0)
                    while len(channel.announces) == before:
                        await asyncio.sleep(0.001)
                    to_announce.append(time.perf_counter() - t0)
                    assert f'"{label}"' in channel.announces[-1].text
                await stack.wait_for(
                    lambda: sum(r.outcome == "in_flight" for r in fake.requests) == 0, timeout=15
                )
    return to_stopped[:stops], to_announce[:stops]


def main() -> None:
    stops = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with RedisServer(data_dir=Path(tempfile.mkdtemp(prefix="fanbot-bench-"))) as server:
        stopped, announced = asyncio.run(bench(server.url, stops))
    print(summary("command -> status stopped", stopped))
    print(summary("command -> announce delivered", announced))


if __name__ == "__main__":
    main()
