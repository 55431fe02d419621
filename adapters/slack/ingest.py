"""Hand each Slack message to the gateway until it takes it, confirming nothing early.

Slack redelivers an event that was not acknowledged only three times (at once, after a
minute, after five), so a Redis outage longer than that would lose messages if the adapter
relied on Slack alone. :class:`RetryingSink` keeps retrying the sink, with back-off, for as long
as the process lives; the listener acknowledges the event once the sink took it (Socket
Mode waits for that; an HTTP delivery, which must be answered within 3 s, gets a 503 while
the retries go on, and Slack's next retry finds the message taken). Deliveries of the same
message (a Slack retry, the ``message`` twin of an ``app_mention``) join the one retry
loop. If the process dies, nothing was confirmed, and Slack redelivers.
"""

from __future__ import annotations

import asyncio
import logging

from bot.logs import ThrottledLog
from bot.ports import InboundSink
from bot.supervise.aio import cancel_all
from bot.supervise.backoff import Backoff
from bot.types import Inbound

log = logging.getLogger(__name__)

MAX_HELD = 10_000
"""Messages retried at once; past it a message gets one try and Slack's own retries."""


class RetryingSink:
    """Retries the sink per message until it accepts.

    Args:
        sink: The gateway's ingest; raising means "not taken".
        backoff: Template for each message's retry delays.
        max_held: Bound on messages retried at once (memory during a long outage).
    """

    def __init__(
        self, *, sink: InboundSink, backoff: Backoff | None = None, max_held: int = MAX_HELD
    ) -> None:
        self._sink = sink
        self._backoff = backoff or Backoff()
        self._max_held = max_held
        self._held: dict[str, asyncio.Task[None]] = {}
        self._log = ThrottledLog(log, interval=30.0)

    @property
    def held(self) -> int:
        """Messages not yet taken by the sink."""
        return len(self._held)

    async def deliver(self, inbound: Inbound, *, wait: float | None) -> bool:
        """Whether the sink took ``inbound`` within ``wait`` seconds (``None``: however long).

        On ``False`` the retries go on in the background.
        """
        key = f"{inbound.thread.platform}:{inbound.dedupe_id}"
        task = self._held.get(key)
        if task is None:
            if len(self._held) >= self._max_held:
                self._log.warning("full", "slack: %d messages held; not holding more", self.held)
                return await self.try_once(inbound, timeout=wait)
            task = asyncio.create_task(self._until_taken(inbound), name=f"slack-hold-{key}")
            self._held[key] = task
            task.add_done_callback(lambda _: self._held.pop(key, None))
        await asyncio.wait({task}, timeout=wait)
        return task.done() and not task.cancelled()

    async def try_once(self, inbound: Inbound, *, timeout: float | None) -> bool:
        """One attempt, no retries (slash commands: Slack never redelivers those)."""
        try:
            async with asyncio.timeout(timeout):
                await self._sink(inbound)
        except Exception as exc:  # the sink's failure is the message's, not the listener's
            self._warn(inbound, exc, None)
            return False
        return True

    async def close(self) -> None:
        """Stop retrying; the messages held stay unacknowledged, so Slack redelivers them."""
        await cancel_all(list(self._held.values()))

    async def _until_taken(self, inbound: Inbound) -> None:
        backoff = Backoff(base=self._backoff.base, cap=self._backoff.cap)
        while True:
            try:
                await self._sink(inbound)
                return
            except Exception as exc:  # any failure: not taken, so try again later
                delay = backoff.next()
                self._warn(inbound, exc, delay)
                await asyncio.sleep(delay)

    def _warn(self, inbound: Inbound, exc: Exception, delay: float | None) -> None:
        then = f"retrying in {delay:.1f}s" if delay is not None else "not retried"
        self._log.warning(
            "sink",
            "slack: the gateway did not take message %s (%s: %s); %s, %d held",
            inbound.dedupe_id,
            type(exc).__name__,
            exc,
            then,
            self.held,
        )
