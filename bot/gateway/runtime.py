"""The gateway process: adapters in, ingress, egress and progress out, in one event loop.

It does no LLM work. Blocking Redis/RQ calls of ingress run in a thread; streams are read
with the async Redis client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Sequence

import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from bot.commands import default_router
from bot.commands.router import CommandRouter
from bot.config import Settings
from bot.deps import Deps
from bot.errors import InboundBusy, RedisUnavailable
from bot.failpoints import Failpoints
from bot.gateway.delivery import Policy
from bot.gateway.egress import Egress
from bot.gateway.ingress import Ingress, IngressResult
from bot.gateway.ops import ops_routes
from bot.gateway.sender import Deliverer
from bot.gateway.starter import AdapterStarter, platform_urls
from bot.gateway.status_cards import ProgressRenderer
from bot.gateway.thread_opener import ThreadOpenings
from bot.observe.gateway import (
    GatewayObserver,
    adapter_checks,
    bind,
    bound_port,
    counted_routes,
    observe_routes,
    observed_ingest,
    redis_ready,
)
from bot.observe.health import Check
from bot.ports import ChannelAdapter
from bot.prices import warm as warm_prices
from bot.redis.connect import connect_async
from bot.redis.watch import RedisWatch
from bot.runs.naming import run_title
from bot.store.outbox import Outbox
from bot.supervise.aio import cancel_all
from bot.types import Inbound, ThreadRef

log = logging.getLogger(__name__)

STOP_STEP_SECONDS = 10.0
"""Each step of a gateway's stop gets at most this long; one that hangs (a platform that
does not answer) is logged and left behind, so SIGTERM always ends the process."""
SLOW_STEP_SECONDS = 0.1
"""A step at least this long is named in the stop line."""


class StopSteps:
    """Runs a stop's steps one after the other, each bounded, and times them."""

    def __init__(self, *, limit: float = STOP_STEP_SECONDS) -> None:
        self.limit = limit
        self.began = time.monotonic()
        self.took: dict[str, float] = {}

    async def run(self, name: str, step: Awaitable[object]) -> None:
        began = time.monotonic()
        try:
            async with asyncio.timeout(self.limit):
                await step
        except TimeoutError:
            log.warning("stopping: %s did not stop within %gs; going on", name, self.limit)
        except Exception:
            log.warning("stopping: %s failed", name, exc_info=True)
        self.took[name] = self.took.get(name, 0.0) + time.monotonic() - began

    def summary(self) -> str:
        """``stopped in 0.21s (telegram 0.15s)``: the whole stop and its slow steps."""
        floor = min(SLOW_STEP_SECONDS, self.limit / 2)
        slow = sorted(((t, n) for n, t in self.took.items() if t >= floor), reverse=True)
        named = ", ".join(f"{n} {t:.2f}s" for t, n in slow)
        return f"stopped in {time.monotonic() - self.began:.2f}s" + (f" ({named})" if named else "")


def async_client(url: str) -> aioredis.Redis:
    """The gateway's async client: a command that meets a connection Redis closed (a
    restart) reconnects and runs again within about a second, instead of failing."""
    return connect_async(
        url,
        decode_responses=True,
        socket_connect_timeout=5,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=8),
        retry_on_error=[aioredis.ConnectionError, aioredis.TimeoutError],
    )


class Gateway:
    """Owns the adapters and the egress/progress loops.

    Args:
        settings: Validated settings.
        adapters: The channels to serve (one per platform).
        deps: Sync dependencies (built from settings when omitted).
        router: Command router (``/help`` only when omitted).
        failpoints: Fault injection for tests (``FANBOT_FAILPOINTS`` when omitted).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        adapters: Sequence[ChannelAdapter],
        deps: Deps | None = None,
        router: CommandRouter | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.settings = settings
        self.deps = deps or Deps.build(settings)
        self.adapters = {a.platform: a for a in adapters}
        self.ingress = Ingress(deps=self.deps, router=router or default_router())
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.aredis = async_client(settings.redis_url)
        self.observer = GatewayObserver(metrics=self.deps.metrics)
        self.redis_watch = RedisWatch(
            url=settings.redis_url,
            who="gateway",
            probe_key=self.deps.keys.redis_probe(self.consumer),
        )
        # Entries for a platform whose adapter is still starting wait rather than spend
        # their retries (an outage at start-up would dead-letter them otherwise).
        self._starting = set(self.adapters)
        sender = Deliverer(
            outbox=Outbox(redis=self.aredis, keys=self.deps.keys),
            adapters=self.adapters,
            policy=Policy.of(settings.gateway),
            consumer=self.consumer,
            starting=lambda: self._starting,
            files=self._workspace_file,
            threads=ThreadOpenings(deps=self.deps, on_bound=self._rebind),
            observer=self.observer,
            failpoints=failpoints or Failpoints.from_env(),
        )
        self.egress = Egress(sender=sender, settings=settings.gateway)
        self.progress = ProgressRenderer(
            redis=self.aredis,
            keys=self.deps.keys,
            adapters=self.adapters,
            min_interval=settings.gateway.progress_edit_seconds,
            card_of=self._run_card,
            announcing=self.egress.announcing,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._serving = False
        self._http: web.AppRunner | None = None
        self._metrics_http: web.AppRunner | None = None
        self.starter = AdapterStarter(
            sink=self.ingest, urls=platform_urls(settings), on_started=self._adapter_started
        )

    async def _rebind(self, run_id: str, thread: ThreadRef) -> None:
        """A run got its thread: its status card moves there."""
        await self.progress.rebind(run_id, thread)

    async def _workspace_file(self, session: str, path: str) -> bytes | None:
        """An attachment's bytes for egress (the sync store, off the event loop)."""
        return await asyncio.to_thread(self.deps.workspace.get_bytes, session, path)

    def _run_card(self, run_id: str) -> tuple[str, ThreadRef | None]:
        record = self.deps.runs.get(run_id)
        if record is None:
            return f"run {run_id[:8]}", None
        return run_title(record, kind="tag"), record.thread

    async def start(self) -> None:
        self.redis_watch.start()
        await self.egress.ensure_group()
        self._tasks = [
            asyncio.create_task(self.egress.run(), name="egress"),
            asyncio.create_task(self.progress.run(), name="progress"),
            asyncio.create_task(self.observer.flushing(), name="metrics"),
            asyncio.create_task(self._warm_prices(), name="warm-prices"),
        ]
        # Each adapter on its own: one whose platform is down is retried in the background.
        await self.starter.start_all(self.adapters.values())
        self._starting.intersection_update(self.starter.retrying)  # refused ones: not waited for
        await self._start_http()
        self._serving = True

    async def _warm_prices(self) -> None:
        """Load the price table off the event loop now: a stop ends its run here, and the
        first one would otherwise wait for the load (see :func:`bot.prices.warm`)."""
        openai = self.settings.openai
        try:
            await asyncio.to_thread(warm_prices, dict.fromkeys([openai.model, *openai.models]))
        except Exception:  # the cost is then computed (and the table loaded) on first use
            log.warning("could not load the price table ahead of use", exc_info=True)

    def _adapter_started(self, adapter: ChannelAdapter) -> None:
        self._starting.discard(adapter.platform)
        self.observer.started.add(adapter.platform)
        log.info("adapter %s started", adapter.platform)

    async def _start_http(self) -> None:
        hooks = [
            r
            for a in self.adapters.values()
            for r in counted_routes(a.platform, a.http_routes(), self.observer)
        ]
        routes = hooks + ops_routes(self.settings, self.deps)  # [] unless FANBOT_OPS__TOKEN is set
        observe = self._observe_routes()  # /metrics, /healthz, /readyz
        gw, own_port = self.settings.gateway, self.settings.observe.metrics_port
        if own_port is not None and observe:
            # Their own listener: the webhook port, public by necessity, does not serve them.
            host = self.settings.observe.metrics_host or gw.http_host
            self._metrics_http = await self._listen(observe, host, own_port, required=True)
        else:
            routes += observe
        if routes:
            self._http = await self._listen(routes, gw.http_host, gw.http_port, bool(hooks))

    async def _listen(
        self, routes: list[web.RouteDef], host: str, port: int, required: bool
    ) -> web.AppRunner:
        app = web.Application(client_max_size=1024 * 1024)
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        if await bind(runner, host, port, required=required):
            log.info("HTTP endpoints on %s:%s", host, bound_port(runner))
        return runner

    @property
    def http_port(self) -> int | None:
        """The port the gateway's HTTP server listens on (None: not serving)."""
        return bound_port(self._http)

    @property
    def metrics_port(self) -> int | None:
        """The port of the endpoints' own listener (None: none, they are on
        :attr:`http_port` if served at all)."""
        return bound_port(self._metrics_http)

    def _observe_routes(self) -> list[web.RouteDef]:
        if not self.settings.observe.http_endpoints:
            return []
        token = self.settings.observe.metrics_token
        return observe_routes(
            deps=self.observer.scrape_deps(self.settings),
            ready=self._ready,
            flush=self.observer.flush,
            token=token.get_secret_value() if token is not None else None,
        )

    async def _ready(self) -> list[Check]:
        retrying = self.starter.retrying
        adapters = adapter_checks(self.adapters, started=self.observer.started, retrying=retrying)
        return [await redis_ready(self.aredis), *adapters]

    @observed_ingest
    async def ingest(self, inbound: Inbound) -> IngressResult | None:
        """Handle one inbound message (what adapters call).

        Raises only when a retry can help (Redis unreachable, loading, full): the adapter
        then leaves the message unconfirmed, retries it and says so in a throttled log
        line, so nothing is logged here (that would be a traceback per retry). Any other
        failure is a bug that would recur on every redelivery and hold up the messages
        behind it: it is logged with its traceback and the message dropped (``None``).
        """
        try:
            result = await asyncio.to_thread(self.ingress.handle, inbound)
        except (RedisError, RedisUnavailable, InboundBusy):
            raise
        except Exception:
            log.exception("ingress failed for %s; message dropped", inbound.dedupe_id)
            return None
        if result.job_id and (adapter := self.adapters.get(inbound.thread.platform)):
            with contextlib.suppress(Exception):
                await adapter.typing(inbound.thread)
        return result

    async def pending_work(self, session_key: str) -> int:
        """Turns, runs and outbox entries still in flight for ``session_key`` (0 = idle)."""

        def count() -> int:
            active = [r for r in self.deps.runs.session_runs(session_key) if not r.status.terminal]
            return self.deps.jobs.turns_in_flight(session_key) + len(active)

        in_flight = await asyncio.to_thread(count)
        return in_flight + (0 if await self.egress.drained() else 1)

    async def stop(self) -> None:
        """Stop everything, each step bounded (:data:`STOP_STEP_SECONDS`), and say in one
        line how long it took and which steps took longest (docs/operations.md)."""
        steps = StopSteps()
        await steps.run("adapter start-ups", self.starter.cancel())
        for name, runner in (("http", self._http), ("metrics http", self._metrics_http)):
            if runner is not None:
                await steps.run(name, runner.cleanup())
        # Egress and progress end before the adapters they post through: a post after an
        # adapter's stop would fail, or (nio) open a new HTTP session that nobody closes.
        # A task cancelled while its Redis client connects may miss the first cancel.
        await steps.run("loops", cancel_all(self._tasks, every=0.1))
        await steps.run("egress", self.egress.close())
        await steps.run("progress", self.progress.close())
        await steps.run("metrics", self.observer.flush())  # what the last deliveries counted
        for adapter in self.adapters.values():
            await steps.run(adapter.platform, adapter.stop())
        await steps.run("redis", self.aredis.aclose())
        self.observer.close()
        await steps.run("redis watch", asyncio.to_thread(self.redis_watch.stop))
        self.deps.close()
        # A start that failed says so in its own line; only a gateway that served says this.
        log.log(logging.INFO if self._serving else logging.DEBUG, "stopping: %s", steps.summary())
