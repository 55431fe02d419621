"""Production Redis end to end: a fan-out over TLS as an ACL user, and a Sentinel failover
while runs are in flight that loses nothing.

Gateway in-process, forked RQ workers, the fake OpenAI server; the Redis servers are real
(``tests.redis_support``).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from bot.redis.connect import connect
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values
from tests.redis_support import SentinelDeployment, make_certs, tls_acl_server, tls_url

PASSWORD = "e2e-pw-5f1c"


def fan_out(n: int, *, delay: float) -> ScriptedModel:
    """A main turn that spawns ``n`` subagents, each answering after ``delay`` seconds."""

    def spawn_or_confirm(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text(f"Started {n}.")
        return ToolCalls([Call("sessions_spawn", {"task": f"job {i}"}) for i in range(n)])

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), spawn_or_confirm)
        .on(is_subagent, lambda req: Text(f"done: {req.last_user_message}", delay=delay))
    )


async def test_a_fan_out_over_tls_as_an_acl_user(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    server = tls_acl_server(tmp_path / "redis", certs, password=PASSWORD)
    url = tls_url(server, certs, user="fanbot", password=PASSWORD)
    try:
        async with FakeOpenAI(fan_out(2, delay=0.2), models=["fake-model"]) as fake:
            channel = MemoryChannel()
            values = stack_values(url, fake.base_url)
            async with Stack(values=values, adapters=[channel], workers=2) as stack:
                await channel.say("two things")
                await stack.wait_for(lambda: len(channel.announces) == 2, timeout=40)
                log = stack.worker_log()
        assert all("Status: success" in a.text for a in channel.announces)
        assert PASSWORD not in log and "Traceback" not in log, log[-3000:]
    finally:
        server.stop()


@dataclass
class WriteProbe:
    """Writes through a fanbot client every 20 ms and keeps when each write succeeded."""

    url: str
    ok: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        client = connect(self.url, socket_timeout=2, connect_timeout=1, retries=0)
        while not self.stop.wait(0.02):
            try:
                client.incr("probe")
                self.ok.append(time.monotonic())
            except (redis.RedisError, OSError):
                self.failed.append(time.monotonic())
        client.close()

    def longest_gap(self, since: float) -> float:
        times = [t for t in self.ok if t >= since]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


LINE = re.compile(
    r"^(\S+ \S+) \w+ fanbot\.redis: (.+?): (cannot reach|Redis at .* reachable again)",
    re.M,
)


def outages(log: str, since: datetime.datetime) -> dict[str, tuple[float, float | None]]:
    """Per process: seconds after ``since`` of its first "cannot reach" line and of its
    "reachable again" line (None if it never came)."""
    found: dict[str, tuple[float, float | None]] = {}
    for match in LINE.finditer(log):
        at = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f")
        offset = (at - since).total_seconds()
        first, _ = found.get(match[2], (offset, None))
        found[match[2]] = (first, offset if "again" in match[3] else None)
    return found


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelDeployment]:
    deployment = SentinelDeployment(root=tmp_path / "sentinel").start()
    yield deployment
    deployment.stop()


async def test_a_sentinel_failover_mid_run_loses_nothing(
    sentinels: SentinelDeployment, tmp_path: Path
) -> None:
    runs = 3
    probe = WriteProbe(sentinels.url)
    prober = threading.Thread(target=probe.run, daemon=True)
    prober.start()
    old_master = sentinels.master_port()
    async with FakeOpenAI(fan_out(runs, delay=6.0), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(sentinels.url, fake.base_url)
        stack = Stack(values=values, adapters=[channel], workers=runs + 1, log_dir=tmp_path)
        async with stack:
            await channel.say("three slow things")
            await stack.wait_for(
                lambda: sum(is_subagent(r.chat) for r in fake.requests) == runs, timeout=40
            )
            wall, start = datetime.datetime.now(), time.monotonic()  # the log's local time
            await asyncio.to_thread(sentinels.failover)
            await stack.wait_for(lambda: sentinels.master_port() != old_master, timeout=30)
            switched = time.monotonic() - start
            await stack.wait_for(lambda: len(channel.announces) == runs, timeout=90)
            announced = time.monotonic() - start
            await asyncio.sleep(3)  # a duplicate would come now
            assert len(channel.announces) == runs
            # After the failover the whole stack still works: a new message, new runs.
            await channel.say("one more", thread=channel.thread("after"))
            await stack.wait_for(lambda: len(channel.announces) == 2 * runs, timeout=60)
            await asyncio.sleep(2)
            log = stack.worker_log()
    probe.stop.set()
    prober.join(5)
    keys = [a.idempotency_key for a in channel.announces]
    assert len(keys) == len(set(keys)) == 2 * runs, keys
    texts = [a.text for a in channel.announces]
    assert all("Status: success" in t for t in texts), (texts, log[-6000:])
    # The runs lived through the failover: none was taken for lost and resumed.
    assert not any("resumed after a worker was lost" in t for t in texts), texts
    down = outages(log, wall)
    assert down and all(back is not None for _, back in down.values()), (down, log[-3000:])
    gap = probe.longest_gap(start)
    slowest = max(back or 0.0 for _, back in down.values())
    print(
        f"\nFAILOVER: Sentinels named the new master after {switched:.2f}s; a fanbot client "
        f"could not write for {gap:.2f}s; {len(down)} worker process(es) said so and were "
        f"writing again by {slowest:.2f}s; the {runs} runs in flight announced once each "
        f"by {announced:.1f}s"
    )
