"""Starting the adapters: each on its own, so one platform that is down never stops the others.

Every adapter gets one attempt at once (concurrently). One that fails is retried in the
background with back-off (1 s doubling to 60 s) while the others serve, each failure one
log line::

    telegram: cannot reach https://api.telegram.org/bot (connection refused); retrying in 4s
    matrix: cannot reach https://matrix.example.org (DNS lookup failed: Name or service not known); retrying in 8s

A :class:`~bot.errors.ConfigError` (a rejected token) is not retried: retrying cannot fix
it. Only when *every* adapter fails that way does the start itself fail, so ``fanbot
gateway`` exits with one line instead of serving nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp
import httpx

from bot.config import Settings
from bot.config_check import public_url
from bot.errors import ConfigError
from bot.ports import ChannelAdapter, InboundSink
from bot.supervise.aio import cancel_all
from bot.supervise.backoff import Backoff
from bot.text.network import causes, unreachable_reason

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 200
_CLIENT_LIBRARIES = frozenset({"httpx", "aiohttp"})


@dataclass(kw_only=True)
class AdapterStarter:
    """Starts adapters and keeps retrying the ones that failed.

    Args:
        sink: What adapters deliver inbound messages to.
        urls: Platform -> the URL it talks to, named in the log (no secrets in it).
        on_started: Called once for each adapter that started (first try or a retry).
        base: First retry delay in seconds.
        cap: Longest retry delay in seconds.
        sleep: Waits between attempts (tests pass a fake clock).
    """

    sink: InboundSink
    urls: Mapping[str, str]
    on_started: Callable[[ChannelAdapter], None]
    base: float = 1.0
    cap: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _retrying: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)

    @property
    def retrying(self) -> list[str]:
        """Platforms not started yet (being retried)."""
        return [name for name, task in self._retrying.items() if not task.done()]

    async def start_all(self, adapters: Iterable[ChannelAdapter]) -> None:
        """Try each adapter once; retry the failures in the background.

        Raises:
            ConfigError: Every adapter refused to start on its configuration.
        """
        adapters = list(adapters)
        errors = await asyncio.gather(*(self._attempt(a) for a in adapters))
        refused = [f"{a.platform}: {e}" for a, e in zip(adapters, errors, strict=True)]
        if adapters and all(isinstance(e, ConfigError) for e in errors):
            raise ConfigError("; ".join(refused))
        for adapter, error in zip(adapters, errors, strict=True):
            if isinstance(error, ConfigError):
                _log_refused(adapter, error)
            elif error is not None:
                task = asyncio.create_task(
                    self._retry(adapter, error), name=f"start-{adapter.platform}"
                )
                self._retrying[adapter.platform] = task

    async def cancel(self) -> None:
        """Stop retrying (the gateway is stopping)."""
        tasks = list(self._retrying.values())
        self._retrying.clear()
        await cancel_all(tasks)

    async def _attempt(self, adapter: ChannelAdapter) -> Exception | None:
        """Start ``adapter`` once; the error, or None once it runs."""
        try:
            await adapter.start(self.sink)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await adapter.stop()  # release whatever the half-done start holds
            return exc
        self.on_started(adapter)
        return None

    async def _retry(self, adapter: ChannelAdapter, error: Exception) -> None:
        backoff = Backoff(base=self.base, cap=self.cap, jitter=0.0)
        while True:
            delay = backoff.next()
            why = describe_failure(adapter.platform, self.urls.get(adapter.platform), error)
            log.warning("%s; retrying in %.0fs", why, delay)
            await self.sleep(delay)
            next_error = await self._attempt(adapter)
            if next_error is None:
                return
            if isinstance(next_error, ConfigError):
                _log_refused(adapter, next_error)
                return
            error = next_error


def platform_urls(settings: Settings) -> dict[str, str]:
    """Platform -> the base URL its adapter talks to (as configured; no token in it)."""
    return {
        "slack": public_url(settings.slack.api_url),
        "telegram": public_url(settings.telegram.api_url),
        "matrix": public_url(settings.matrix.homeserver or ""),
    }


def _log_refused(adapter: ChannelAdapter, error: ConfigError) -> None:
    log.error("%s: %s; not retrying (fix it and restart)", adapter.platform, error)


def describe_failure(platform: str, url: str | None, exc: BaseException) -> str:
    """``matrix: cannot reach <url> (DNS lookup failed: …)`` or ``(connection refused)``
    for a network failure (the client library's exception type when the reason is less
    plain), else ``telegram: cannot start: <Type>: <message>`` (one line, bounded)."""
    chain = causes(exc)
    if any(_is_network(e) for e in chain):
        named = next((e for e in chain if _from_client_library(e)), chain[-1])
        why = unreachable_reason(exc) or type(named).__name__
        return f"{platform}: cannot reach {url or 'the platform'} ({why})"
    reason = " ".join(str(exc).split())
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    return f"{platform}: cannot start: {type(exc).__name__}: {reason}"


def _is_network(exc: BaseException) -> bool:
    return isinstance(exc, OSError | aiohttp.ClientConnectionError | httpx.TransportError)


def _from_client_library(exc: BaseException) -> bool:
    return type(exc).__module__.partition(".")[0] in _CLIENT_LIBRARIES
