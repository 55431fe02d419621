"""Metrics, health and readiness against a running stack: the gateway in-process, a
``fanbot worker`` launcher with ``--metrics-port``, forked job horses, the fake model."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bot.errors import DeliveryError
from bot.testing import MemoryChannel, until
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from bot.types import Usage
from tests.e2e.conftest import stack_values

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
RUNS = 4  # on 2 workers with max_concurrent 3: two run, one waits for a worker, one for a slot
GAUGES = (
    "fanbot_queue_depth",
    "fanbot_queue_executing",
    "fanbot_queue_oldest_age_seconds",
    "fanbot_subagents_waiting_for_slot",
    "fanbot_runs_active",
    "fanbot_outbox_backlog",
    "fanbot_outbox_lag_seconds",
)


def fan_out_model() -> ScriptedModel:
    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool" or "four things" not in req.last_user_message:
            return Text("ok", usage=Usage(prompt_tokens=10, completion_tokens=2))
        return ToolCalls([Call("sessions_spawn", {"task": f"task {i}"}) for i in range(RUNS)])

    def subagent(req: ChatRequest) -> Text:
        return Text("done", delay=1.0, usage=Usage(prompt_tokens=100, completion_tokens=20))

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


class WebhookChannel(MemoryChannel):
    """A channel with a webhook that answers 400 to a body that is not JSON."""

    def http_routes(self) -> list[web.RouteDef]:
        async def hook(request: web.Request) -> web.Response:
            try:
                await request.json()
            except ValueError:
                return web.Response(status=400, text="bad body")
            return web.Response(text="ok")

        return [web.post("/hook", hook)]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        return response.status, await response.text()


async def scrape(url: str) -> Samples:
    status, text = await get(url + "/metrics")
    assert status == 200
    return parse(text)


async def test_a_fan_out_moves_every_metric_and_both_targets_agree(
    redis_url: str, tmp_path: Path
) -> None:
    port, worker_port = free_port(), free_port()
    async with FakeOpenAI(fan_out_model(), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            prices={"fake-model": {"input": 1.0, "output": 2.0}},
            gateway={"http_host": LOOPBACK, "http_port": port, "delivery_backoff_seconds": 0.05},
            telegram={"allow_users": ["alice"]},
            subagents={"max_concurrent": 3},
            workers={"concurrency": 1},  # two runs at once on two processes, in either pool
        )
        peaks: Samples = {}
        channel = WebhookChannel(platform="telegram")
        pool = WorkerPool(
            env=hermetic_env(values),
            count=2,
            log_path=tmp_path / "workers.log",
            args=["--metrics-port", str(worker_port), "--metrics-host", LOOPBACK],
        )
        gateway_url, worker_url = f"http://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{worker_port}"
        async with Stack(values=values, adapters=[channel], workers=0, log_dir=tmp_path) as stack:
            pool.start()
            watch = asyncio.create_task(_watch_gauges(gateway_url, peaks))
            try:
                await until(lambda: _ok(worker_url + "/readyz"), timeout=30)
                assert await get(gateway_url + "/healthz") == (200, '{"status": "alive"}')
                status, body = await get(gateway_url + "/readyz")
                assert status == 200 and '"adapter:telegram": {"ok": true' in body

                await channel.say("please do four things")
                await until(lambda: len(channel.announces) == RUNS, timeout=40)
                await channel.say("again", message_id="dup")
                await channel.say("again", message_id="dup")  # a redelivery
                await channel.say("hello", user="mallory")  # not in allow_users
                await channel.say("hm", thread=channel.thread("other"), mentioned=False)
                async with aiohttp.ClientSession() as http:
                    await http.post(gateway_url + "/hook", data=b"{not json")
                busy = DeliveryError("busy", retry_after=1.0)  # a backlog with an age for a second
                channel.fail_next([busy, DeliveryError("gone", permanent=True)])
                await channel.say("/help")
                await until(lambda: _drained(stack), timeout=30)
                gw = await until(lambda: _scrape_when(gateway_url, _moved), timeout=30)
                wk = await scrape(worker_url)
                print(
                    "\n--- /metrics after a fan-out of four ---\n"
                    + (await get(gateway_url + "/metrics"))[1]
                )
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)
                await asyncio.to_thread(pool.stop)
    _assert_fan_out(gw)
    _assert_gauges_moved(peaks)
    stored = ("_total", "_count", "_sum", "_bucket")
    for key, number in gw.items():
        if key[0].endswith(stored):
            assert wk.get(key) == number, key  # the same cluster-wide totals from both


def _assert_fan_out(m: Samples) -> None:
    run = {"agent": "main", "type": "general-purpose"}
    assert value(m, "fanbot_runs_started_total", **run) == RUNS
    assert value(m, "fanbot_runs_ended_total", status="success", **run) == RUNS
    assert value(m, "fanbot_run_duration_seconds_count", status="success") == RUNS
    assert value(m, "fanbot_queue_wait_seconds_count", queue="subagents") == RUNS
    assert value(m, "fanbot_queue_wait_seconds_count", queue="turns") >= 2
    assert value(m, "fanbot_spawn_to_first_token_seconds_count", type="general-purpose") == RUNS
    assert 0.3 <= value(m, "fanbot_spawn_to_first_token_seconds_sum") / RUNS < 30
    assert value(m, "fanbot_finish_to_announce_seconds_count", platform="telegram") == RUNS
    le_inf = value(m, "fanbot_finish_to_announce_seconds_bucket", le="+Inf")
    assert le_inf == RUNS
    assert value(m, "fanbot_model_tokens_total", model="fake-model", kind="completion") >= RUNS * 20
    assert value(m, "fanbot_model_tokens_total", model="fake-model", kind="prompt") >= RUNS * 100
    assert value(m, "fanbot_model_cost_usd_total", model="fake-model") >= RUNS * 140 / 1e6
    assert value(m, "fanbot_model_calls_total", model="fake-model", outcome="ok") >= RUNS + 2
    assert value(m, "fanbot_outbox_delivered_total", platform="telegram", kind="announce") == RUNS
    assert value(m, "fanbot_outbox_delivered_total", kind="reply") >= 2
    assert value(m, "fanbot_outbox_retries_total", platform="telegram") == 1
    assert value(m, "fanbot_outbox_dead_letters_total", platform="telegram") == 1
    assert value(m, "fanbot_dead_letters") == 1
    inbound = {o: value(m, "fanbot_gateway_inbound_total", platform="telegram", outcome=o)
               for o in ("accepted", "deduped", "refused", "ignored", "bad_request")}  # fmt: skip
    assert inbound == {"accepted": 3, "deduped": 1, "refused": 1, "ignored": 1, "bad_request": 1}
    assert value(m, "fanbot_workers") == 2
    assert value(m, "fanbot_runs_active") == 0
    assert value(m, "fanbot_approvals_parked") == 0
    assert value(m, "fanbot_redis_up") == 1
    assert value(m, "fanbot_outbox_backlog") == 0
    for queue in ("turns", "subagents"):
        assert value(m, "fanbot_queue_depth", queue=queue) == 0
        assert ("fanbot_queue_oldest_age_seconds", frozenset({("queue", queue)})) in m


async def _watch_gauges(url: str, peaks: Samples) -> None:
    """Scrape every 0.1 s, keeping each gauge series' highest value."""
    while True:
        for key, number in (await scrape(url)).items():
            if key[0] in GAUGES:
                peaks[key] = max(number, peaks.get(key, 0.0))
        await asyncio.sleep(0.1)


def _assert_gauges_moved(peaks: Samples) -> None:
    assert value(peaks, "fanbot_queue_depth", queue="subagents") >= 1
    assert value(peaks, "fanbot_queue_oldest_age_seconds", queue="subagents") > 0
    assert value(peaks, "fanbot_queue_executing", queue="subagents") == 2
    assert value(peaks, "fanbot_subagents_waiting_for_slot") >= 1
    assert value(peaks, "fanbot_runs_active", status="running") == 2
    assert value(peaks, "fanbot_runs_active", status="queued") >= 1
    assert value(peaks, "fanbot_outbox_backlog") >= 1
    assert value(peaks, "fanbot_outbox_lag_seconds") > 0


def _moved(m: Samples) -> bool:
    return (
        value(m, "fanbot_outbox_dead_letters_total") == 1
        and value(m, "fanbot_runs_ended_total") == RUNS
        and value(m, "fanbot_finish_to_announce_seconds_count") == RUNS
        and value(m, "fanbot_outbox_delivered_total", kind="reply") >= 2  # two turns answered
    )


async def _scrape_when(url: str, ready: Callable[[Samples], bool]) -> Samples | None:
    samples = await scrape(url)
    return samples if ready(samples) else None


async def _ok(url: str) -> bool:
    try:
        status, _ = await get(url)
    except aiohttp.ClientError:
        return False
    return status == 200


async def _drained(stack: Stack) -> bool:
    assert stack.gateway is not None
    return await stack.gateway.egress.drained()


async def test_worker_readyz_names_a_missing_worker_until_it_is_back(
    redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    values = stack_values(redis_url, "http://127.0.0.1:9")
    pool = WorkerPool(
        env=hermetic_env(values),
        count=2,
        log_path=tmp_path / "workers.log",
        args=["--metrics-port", str(port), "--metrics-host", LOOPBACK],
    ).start()
    url = f"http://{LOOPBACK}:{port}"
    try:
        await until(lambda: _ok(url + "/readyz"), timeout=30)
        assert (await get(url + "/healthz"))[0] == 200
        os.kill(pool.worker_pids()[0], signal.SIGKILL)
        status, body = await until(lambda: _not_ready(url), timeout=10, every=0.02)
        assert status == 503
        assert '"not_ready": ["workers"]' in body and "1 of 2 worker(s) listening" in body
        await until(lambda: _ok(url + "/readyz"), timeout=30)  # restarted by the launcher
        assert (await get(url + "/nope"))[0] == 404
    finally:
        await asyncio.to_thread(pool.stop)


async def _not_ready(url: str) -> tuple[int, str] | None:
    status, body = await get(url + "/readyz")
    return (status, body) if status == 503 else None


class FlakyChannel(MemoryChannel):
    """A channel whose platform cannot be reached at start (retried in the background)."""

    async def start(self, sink: Any) -> None:
        raise ConnectionError("platform unreachable")


async def test_gateway_readyz_names_an_adapter_that_is_not_connected(redis_url: str) -> None:
    values = stack_values(redis_url, "http://127.0.0.1:9")
    flaky, fine = FlakyChannel(platform="slack"), MemoryChannel(platform="telegram")
    async with Stack(values=values, adapters=[flaky, fine], workers=0) as stack:
        assert stack.gateway is not None and stack.gateway.http_port  # a free port
        url = f"http://{LOOPBACK}:{stack.gateway.http_port}"
        status, body = await get(url + "/readyz")
        assert (await get(url + "/healthz"))[0] == 200
    assert status == 503
    assert '"not_ready": ["adapter:slack"]' in body
    assert '"detail": "starting (retrying to connect)"' in body
    assert '"adapter:telegram": {"ok": true' in body
