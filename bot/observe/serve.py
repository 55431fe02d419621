"""``/metrics``, ``/healthz`` and ``/readyz`` for a ``fanbot worker`` launcher.

The launcher is a plain sync supervisor, so this is the standard library's threading HTTP
server on its own daemon thread (``--metrics-port``; 0, the default, serves nothing). It
is ready when Redis answers and every worker process it supervises is registered with RQ
(started and listening on its queues).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from redis.exceptions import RedisError

from bot.deps import Deps
from bot.errors import ConfigError
from bot.observe.export import CONTENT_TYPE_LATEST, render, scrape_deps
from bot.observe.health import ALIVE, UNAUTHORIZED, Check, authorized, redis_check, verdict

log = logging.getLogger(__name__)

WorkerPids = Callable[[], list[int]]
"""The PIDs of the worker processes the launcher runs now (alive ones)."""


@dataclass(frozen=True, kw_only=True)
class WorkerEndpoints:
    """What the endpoints read: the stores, and the launcher's view of its workers."""

    deps: Deps
    expected: int
    pids: WorkerPids
    token: str | None = None

    def checks(self) -> list[Check]:
        redis = redis_check(self.deps.connection)
        if not redis.ok:
            return [redis, Check(name="workers", ok=False, detail="Redis is not reachable")]
        return [redis, self._workers()]

    def _workers(self) -> Check:
        try:
            registered = self.deps.jobs.worker_pids(socket.gethostname())
        except RedisError as exc:
            return Check(name="workers", ok=False, detail=f"{type(exc).__name__}: {exc}")
        pids = self.pids()
        listening = [p for p in pids if p in registered]
        detail = f"{len(listening)} of {self.expected} worker(s) listening"
        return Check(name="workers", ok=len(listening) >= self.expected, detail=detail)


def _handler(endpoints: WorkerEndpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if not authorized(path, self.headers.get("Authorization"), endpoints.token):
                self._json(401, UNAUTHORIZED, challenge=True)
            elif path == "/metrics":
                self._send(200, render(endpoints.deps), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._json(200, ALIVE)
            elif path == "/readyz":
                self._json(*verdict(endpoints.checks()))
            else:
                self._json(
                    404, {"error": "not found", "paths": ["/metrics", "/healthz", "/readyz"]}
                )

        def _json(self, status: int, body: dict[str, Any], *, challenge: bool = False) -> None:
            self._send(status, json.dumps(body).encode(), "application/json", challenge)

        def _send(
            self, status: int, body: bytes, content_type: str, challenge: bool = False
        ) -> None:
            self.send_response(status)
            if challenge:
                self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics endpoint: " + format, *args)

    return Handler


class EndpointServer(ThreadingHTTPServer):
    """The server; :meth:`shutdown` also closes its socket and its Redis client."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, endpoints: WorkerEndpoints) -> None:
        super().__init__(address, _handler(endpoints))
        self.endpoints = endpoints

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()
        self.endpoints.deps.close()


def serve(endpoints: WorkerEndpoints, *, host: str, port: int) -> EndpointServer:
    """Start serving on ``host:port`` in a daemon thread; ``shutdown()`` the result to stop.

    Raises:
        OSError: The address cannot be bound.
    """
    server = EndpointServer((host, port), endpoints=endpoints)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    log.info("metrics and health on http://%s:%s/metrics", host, server.server_address[1])
    return server


def serve_worker_endpoints(
    deps: Deps, *, host: str, port: int, expected: int, pids: WorkerPids
) -> EndpointServer | None:
    """:func:`serve` for a launcher of ``expected`` workers; None when ``port`` is 0.

    Raises:
        ConfigError: The address cannot be bound (taken, or not this host's).
    """
    if not port:
        return None
    own = scrape_deps(deps.settings)
    secret = deps.settings.observe.metrics_token
    token = secret.get_secret_value() if secret is not None else None
    endpoints = WorkerEndpoints(deps=own, expected=expected, pids=pids, token=token)
    try:
        return serve(endpoints, host=host, port=port)
    except OSError as exc:
        own.close()
        raise ConfigError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc})") from exc
