"""Stop latency against forked workers.

Each stop hits a run that is in the middle of a long model call (the fake model hangs).
Measured from the ``/subagents stop`` message entering the gateway to (a) the run's status
being ``stopped`` in Redis and (b) its announce being delivered to the channel. Targets
(issue 6): under 1 s and under 2 s.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.bench.stats import summary
from bot.deps import Deps
from bot.redis.server import RedisServer
from bot.sessions import requester_session_key
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Hang,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import RunRecord, RunStatus, ThreadRef

WAVE = 4


def fanout_model() -> ScriptedModel:
    """Main agent: ``spawn a b`` spawns one run per word (label = the word); runs hang."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        words = req.last_user_message.split("spawn", 1)[-1].split()
        return ToolCalls([Call("sessions_spawn", {"task": f"task {w}", "label": w}) for w in words])

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, Hang(120))
    )


def runs_of(deps: Deps, thread: ThreadRef) -> dict[str, RunRecord]:
    key = requester_session_key(agent_id="main", thread=thread)
    return {r.label: r for r in deps.runs.session_runs(key)}


def _values(url: str, base_url: str) -> dict[str, Any]:
    return {
        "redis_url": url,
        "openai": {"base_url": base_url, "model": "fake-model", "max_retries": 2},
        "subagents": {"heartbeat_seconds": 0.5, "stale_after_seconds": 3},
        "gateway": {"progress_edit_seconds": 0.5, "reclaim_idle_seconds": 2},
    }


async def _bench(url: str, stops: int) -> tuple[list[float], list[float]]:
    to_stopped: list[float] = []
    to_announce: list[float] = []
    async with FakeOpenAI(fanout_model(), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = _values(url, fake.base_url)
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
                    lambda t=thread: (  # type: ignore[misc]
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
                    while _status(deps, run.run_id) is not RunStatus.STOPPED:
                        await asyncio.sleep(0.001)
                    to_stopped.append(time.perf_counter() - t0)
                    while len(channel.announces) == before:
                        await asyncio.sleep(0.001)
                    to_announce.append(time.perf_counter() - t0)
                    if f'"{label}"' not in channel.announces[-1].text:
                        raise RuntimeError(f"announce of {label} missing or out of order")
                await stack.wait_for(
                    lambda: sum(r.outcome == "in_flight" for r in fake.requests) == 0, timeout=15
                )
    return to_stopped[:stops], to_announce[:stops]


def _status(deps: Deps, run_id: str) -> RunStatus | None:
    record = deps.runs.get(run_id)
    return None if record is None else record.status


async def run_stop(*, stops: int = 20) -> list[str]:
    """Run the benchmark; returns the summary lines."""
    with (
        tempfile.TemporaryDirectory(prefix="fanbot-bench-") as tmp,
        RedisServer(data_dir=Path(tmp)) as server,
    ):
        stopped, announced = await _bench(server.url, stops)
    return [
        summary("command -> status stopped", stopped),
        summary("command -> announce delivered", announced),
    ]
