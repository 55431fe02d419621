"""``/metrics`` and ``/readyz`` are not public on the webhook port (issue 27): with
``FANBOT_OBSERVE__METRICS_TOKEN`` they need the bearer token, and
``FANBOT_OBSERVE__METRICS_PORT`` serves them on a listener of their own. Over real HTTP
against an in-process gateway (and the worker launcher's endpoint server); real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from bot.config import Settings
from bot.deps import Deps
from bot.gateway.runtime import Gateway
from bot.observe.serve import serve_worker_endpoints
from bot.testing import MemoryChannel
from bot.testing.netutil import LOOPBACK, free_port

TOKEN = "s3cret-metrics-token"


class WebhookChannel(MemoryChannel):
    def http_routes(self) -> list[web.RouteDef]:
        async def hook(_request: web.Request) -> web.Response:
            return web.Response(text="ok")

        return [web.post("/hook", hook)]


async def statuses(base: str, headers: dict[str, str] | None = None) -> dict[str, int]:
    got = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for path in ("/metrics", "/readyz", "/healthz"):
            async with http.get(base + path, headers=headers or {}) as response:
                got[path] = response.status
    return got


async def running(settings: Settings) -> AsyncIterator[Gateway]:
    gateway = Gateway(settings=settings, adapters=[WebhookChannel()], deps=Deps.build(settings))
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def settings_with(redis_url: str, **observe: object) -> Settings:
    return Settings(
        redis_url=redis_url,
        gateway={"http_host": LOOPBACK, "http_port": 0},  # type: ignore[arg-type]
        observe=observe,  # type: ignore[arg-type]
    )


@pytest.fixture
async def token_gateway(redis_url: str) -> AsyncIterator[Gateway]:
    async for gateway in running(settings_with(redis_url, metrics_token=TOKEN)):
        yield gateway


async def test_with_a_token_metrics_and_readyz_need_it(token_gateway: Gateway) -> None:
    base = f"http://{LOOPBACK}:{token_gateway.http_port}"
    assert await statuses(base) == {"/metrics": 401, "/readyz": 401, "/healthz": 200}
    wrong = {"Authorization": "Bearer not-it"}
    assert await statuses(base, wrong) == {"/metrics": 401, "/readyz": 401, "/healthz": 200}
    basic = {"Authorization": f"Basic {TOKEN}"}
    assert (await statuses(base, basic))["/metrics"] == 401
    right = {"Authorization": f"Bearer {TOKEN}"}
    got = await statuses(base, right)
    assert got["/metrics"] == 200 and got["/healthz"] == 200 and got["/readyz"] in (200, 503)
    async with aiohttp.ClientSession() as http, http.get(base + "/metrics") as response:
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert "fanbot_" not in await response.text()


async def test_their_own_port_keeps_them_off_the_webhook_port(redis_url: str) -> None:
    settings = settings_with(redis_url, metrics_port=0, metrics_host=LOOPBACK)
    async for gateway in running(settings):
        assert gateway.metrics_port is not None and gateway.metrics_port != gateway.http_port
        hooks = f"http://{LOOPBACK}:{gateway.http_port}"
        assert await statuses(hooks) == {"/metrics": 404, "/readyz": 404, "/healthz": 404}
        async with aiohttp.ClientSession() as http, http.post(hooks + "/hook", json={}) as r:
            assert r.status == 200  # the webhooks stay where they were
        own = await statuses(f"http://{LOOPBACK}:{gateway.metrics_port}")
        assert own["/metrics"] == 200 and own["/healthz"] == 200


async def test_without_settings_they_stay_on_the_gateway_port(redis_url: str) -> None:
    async for gateway in running(settings_with(redis_url)):
        assert gateway.metrics_port is None
        got = await statuses(f"http://{LOOPBACK}:{gateway.http_port}")
        assert got["/metrics"] == 200 and got["/healthz"] == 200


async def test_the_worker_launchers_endpoints_need_the_token_too(redis_url: str) -> None:
    deps = Deps.build(settings_with(redis_url, metrics_token=TOKEN))
    server = serve_worker_endpoints(deps, host=LOOPBACK, port=free_port(), expected=0, pids=list)
    assert server is not None
    base = f"http://{LOOPBACK}:{server.server_address[1]}"
    try:
        assert await statuses(base) == {"/metrics": 401, "/readyz": 401, "/healthz": 200}
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert await statuses(base, right) == {"/metrics": 200, "/readyz": 200, "/healthz": 200}
    finally:
        server.shutdown()
        deps.close()
