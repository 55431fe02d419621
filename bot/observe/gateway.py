"""The gateway's observing: ``/metrics``, ``/healthz`` and ``/readyz`` routes, inbound
outcomes and webhook bad requests counted, and the ingress span of each message.

The routes join the adapters' webhooks on the gateway's HTTP server
(``FANBOT_GATEWAY__HTTP_HOST``/``__HTTP_PORT``), or get a listener of their own with
``FANBOT_OBSERVE__METRICS_PORT``; ``FANBOT_OBSERVE__METRICS_TOKEN`` guards ``/metrics``
and ``/readyz`` (:func:`bot.observe.health.authorized`);
``FANBOT_OBSERVE__HTTP_ENDPOINTS=false`` leaves them out.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import redis.asyncio as aioredis
from aiohttp import web
from redis.exceptions import RedisError

from bot.config import Settings
from bot.deps import Deps
from bot.observe import metric_defs as catalog
from bot.observe import tracing
from bot.observe.export import CONTENT_TYPE_LATEST, render, scrape_deps
from bot.observe.health import ALIVE, UNAUTHORIZED, Check, authorized, verdict
from bot.store.metrics import FLUSH_SECONDS, MetricsStore, Update
from bot.store.outbox import entry_time
from bot.types import Inbound, Outbound, OutboundKind

log = logging.getLogger(__name__)

READY_TIMEOUT = 2.0  # a Redis that takes longer than this to PING is not ready
BAD_REQUEST_STATUSES = frozenset({400, 401, 403, 413, 415})


@dataclass(kw_only=True)
class GatewayObserver:
    """Counts the gateway's metric events; knows which adapters run.

    Args:
        metrics: The gateway process's metrics (its sync stores'): events are kept there
            and written by :meth:`flushing` every :data:`~bot.store.metrics.FLUSH_SECONDS`,
            before each scrape of ``/metrics`` and at the gateway's stop.
    """

    metrics: MetricsStore
    started: set[str] = field(default_factory=set)
    _scrape: Deps | None = None

    def scrape_deps(self, settings: Settings) -> Deps:
        """The fail-fast stores ``/metrics`` reads (built once, closed by :meth:`close`)."""
        if self._scrape is None:
            self._scrape = scrape_deps(settings)
        return self._scrape

    def close(self) -> None:
        if self._scrape is not None:
            self._scrape.close()
            self._scrape = None

    async def add(self, updates: Sequence[Update]) -> None:
        """Count ``updates`` (kept in memory: no round trip)."""
        self.metrics.add(updates)

    async def flush(self) -> None:
        """Write what is kept, off the event loop (best effort: a metric is never worth
        failing a message; what Redis refused is kept for the next flush)."""
        if not self.metrics.pending:
            return
        try:
            await asyncio.to_thread(self.metrics.flush)
        except (RedisError, OSError) as exc:
            log.debug("metrics not written yet: %s", exc)

    async def flushing(self) -> None:
        """Flush every :data:`~bot.store.metrics.FLUSH_SECONDS`, until cancelled."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()


class _Result(Protocol):
    @property
    def duplicate(self) -> bool: ...

    @property
    def verdict(self) -> str: ...


def outcome(result: _Result | None) -> catalog.InboundOutcome:
    """The ``outcome`` label of one ingress result (pure; ``None``: ingress crashed)."""
    if result is None:
        return catalog.InboundOutcome.ERROR
    if result.duplicate:
        return catalog.InboundOutcome.DEDUPED
    if result.verdict == "accept":
        return catalog.InboundOutcome.ACCEPTED
    if result.verdict == "ignored: not allowed":
        return catalog.InboundOutcome.REFUSED
    if result.verdict == "ignored: over the message limit":
        return catalog.InboundOutcome.LIMITED
    return catalog.InboundOutcome.IGNORED


class _Observed(Protocol):
    observer: GatewayObserver


S = TypeVar("S", bound=_Observed)
S2 = TypeVar("S2")
R = TypeVar("R", bound=_Result)


def observed_ingest(
    ingest: Callable[[S, Inbound], Awaitable[R | None]],
) -> Callable[[S, Inbound], Awaitable[R | None]]:
    """Decorate the gateway's ``ingest``: a server span per message (the trace's root) and
    its outcome counted. A raise (Redis away, the event busy) is retried by the adapter
    and counted when it is finally handled."""

    @functools.wraps(ingest)
    async def run(self: S, inbound: Inbound) -> R | None:
        platform = inbound.thread.platform
        attrs = {"fanbot.platform": platform, "messaging.message.id": inbound.dedupe_id}
        with tracing.span("gateway.ingress", attrs, server=True) as span:
            result = await ingest(self, inbound)
            tracing.set_attributes(span, {"fanbot.outcome": outcome(result).value})
        await self.observer.add(catalog.inbound(platform, outcome(result)))
        return result

    return run


def counted_routes(
    platform: str, routes: Iterable[web.RouteDef], observer: GatewayObserver
) -> list[web.RouteDef]:
    """An adapter's webhook routes, each answer in 4xx counted as a ``bad_request``."""

    def wrap(handler: Any) -> Any:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                response: web.StreamResponse = await handler(request)
            except web.HTTPClientError:
                await observer.add(catalog.inbound(platform, catalog.InboundOutcome.BAD_REQUEST))
                raise
            if response.status in BAD_REQUEST_STATUSES:
                await observer.add(catalog.inbound(platform, catalog.InboundOutcome.BAD_REQUEST))
            return response

        return run

    return [web.RouteDef(r.method, r.path, wrap(r.handler), r.kwargs) for r in routes]


ReadyCheck = Callable[[], Awaitable[list[Check]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def observe_routes(
    *,
    deps: Deps,
    ready: ReadyCheck,
    flush: Callable[[], Awaitable[None]] | None = None,
    token: str | None = None,
) -> list[web.RouteDef]:
    """``/metrics`` (Prometheus text; ``flush``: write this process's kept metrics
    first), ``/healthz`` and ``/readyz`` (JSON); with ``token``, the first and last
    answer 401 without ``Authorization: Bearer <token>``."""

    def guarded(handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            if not authorized(request.path, request.headers.get("Authorization"), token):
                return web.json_response(
                    UNAUTHORIZED, status=401, headers={"WWW-Authenticate": "Bearer"}
                )
            return await handler(request)

        return run

    async def metrics(_request: web.Request) -> web.Response:
        if flush is not None:
            await flush()
        body = await asyncio.to_thread(render, deps)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response(ALIVE)

    async def readyz(_request: web.Request) -> web.Response:
        status, body = verdict(await ready())
        return web.json_response(body, status=status)

    return [
        web.get("/metrics", guarded(metrics)),
        web.get("/healthz", healthz),
        web.get("/readyz", guarded(readyz)),
    ]


async def redis_ready(client: aioredis.Redis) -> Check:
    """The gateway's Redis answers a PING within :data:`READY_TIMEOUT`."""
    try:
        await asyncio.wait_for(client.ping(), READY_TIMEOUT)
    except (aioredis.RedisError, OSError, TimeoutError) as exc:
        return Check(name="redis", ok=False, detail=f"{type(exc).__name__}: {exc}")
    return Check(name="redis", ok=True)


def adapter_checks(
    configured: Iterable[str], *, started: set[str], retrying: Iterable[str]
) -> list[Check]:
    """One check per configured adapter (pure): ready once it started."""
    waiting = set(retrying)
    checks = []
    for platform in configured:
        if platform in started:
            checks.append(Check(name=f"adapter:{platform}", ok=True))
        else:
            why = "starting (retrying to connect)" if platform in waiting else "not started"
            checks.append(Check(name=f"adapter:{platform}", ok=False, detail=why))
    return checks


async def bind(runner: web.AppRunner, host: str, port: int, *, required: bool) -> bool:
    """Listen on ``host:port``; True if listening.

    Raises:
        OSError: The address is taken and ``required`` (webhooks need it). Without
            webhooks only the observing endpoints are lost: logged, and the gateway serves.
    """
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        if required:
            raise
        log.warning("cannot serve /metrics, /healthz, /readyz on %s:%s: %s", host, port, exc)
        return False
    return True


def bound_port(runner: web.AppRunner | None) -> int | None:
    """The port ``runner`` listens on (``FANBOT_GATEWAY__HTTP_PORT=0`` picks one)."""
    for address in runner.addresses if runner is not None else ():
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return None


def delivered_updates(message: Outbound | None, entry_id: str) -> list[Update]:
    """The metric updates of one delivered outbox entry (an announce: its latency too)."""
    if message is None:
        return []
    announce = message.kind is OutboundKind.ANNOUNCE
    age = time.time() - entry_time(entry_id) if announce else None
    return catalog.delivered(message.thread.platform, message.kind.value, since_written=age)


class _Entry(Protocol):
    @property
    def message(self) -> Outbound | None: ...

    @property
    def key(self) -> str: ...


E = TypeVar("E", bound=_Entry)
P = ParamSpec("P")


def observed_delivery(
    deliver: Callable[Concatenate[S2, E, P], Awaitable[None]],
) -> Callable[Concatenate[S2, E, P], Awaitable[None]]:
    """Decorate the sender's ``deliver``: a ``deliver`` span continuing the trace the
    outbox entry carries (the turn or run that wrote it)."""

    @functools.wraps(deliver)
    async def run(self: S2, entry: E, /, *args: P.args, **kwargs: P.kwargs) -> None:
        message = entry.message
        parent = message.traceparent if message is not None else ""
        attrs = {"fanbot.outbox_key": entry.key}
        if message is not None:
            attrs |= {"fanbot.platform": message.thread.platform, "fanbot.kind": message.kind.value}
        with tracing.span("deliver", attrs, parent=parent):
            await deliver(self, entry, *args, **kwargs)

    return run
