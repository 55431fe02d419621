"""The worker launcher's endpoints when Redis is away: alive, not ready, and a scrape that
still answers (``fanbot_redis_up 0``); and a port that cannot be bound is a clear error."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from bot.config import Settings
from bot.deps import Deps
from bot.errors import ConfigError
from bot.observe.serve import serve_worker_endpoints
from bot.testing.netutil import LOOPBACK, free_port


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_redis_away_means_alive_but_not_ready() -> None:
    deps = Deps.build(Settings(redis_url=f"redis://{LOOPBACK}:{free_port()}/0"))
    server = serve_worker_endpoints(deps, host=LOOPBACK, port=free_port(), expected=1, pids=list)
    assert server is not None
    url = f"http://{LOOPBACK}:{server.server_address[1]}"
    try:
        assert fetch(url + "/healthz") == (200, '{"status": "alive"}')
        status, body = fetch(url + "/readyz")
        assert status == 503
        assert json.loads(body)["not_ready"] == ["redis", "workers"]
        status, text = fetch(url + "/metrics")
        assert status == 200 and "fanbot_redis_up 0.0" in text
    finally:
        server.shutdown()
        deps.close()


def test_port_zero_serves_nothing_and_a_taken_port_is_a_config_error(redis_url: str) -> None:
    deps = Deps.build(Settings(redis_url=redis_url))
    try:
        assert serve_worker_endpoints(deps, host=LOOPBACK, port=0, expected=1, pids=list) is None
        first = serve_worker_endpoints(deps, host=LOOPBACK, port=free_port(), expected=1, pids=list)
        assert first is not None
        port = first.server_address[1]
        with pytest.raises(ConfigError, match=f"--metrics-port {port}: cannot listen"):
            serve_worker_endpoints(deps, host=LOOPBACK, port=port, expected=1, pids=list)
        first.shutdown()
    finally:
        deps.close()
