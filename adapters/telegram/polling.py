"""Long polling that confirms an update to Telegram only after the sink took it.

PTB's ``Updater`` moves its offset past a batch as soon as ``getUpdates`` returned it,
before any handler ran, and an exception in a handler goes to the error handler: an update
whose hand-over failed (Redis down) is confirmed all the same, and lost. This loop calls
``getUpdates`` itself. The offset moves past an update only once ``deliver`` returned;
when it raises, the loop backs off and fetches again from that very update (Telegram keeps
unconfirmed updates for a day), so updates are handed over in order and none is skipped.
A redelivered update has the same dedupe id, so one that was in fact taken is a no-op.

Updates are read as JSON, not as PTB objects: PTB parses a whole batch or raises, so one
update it cannot parse (a field it does not know yet is fine, a missing one is not) would
make every later fetch fail the same way and stop polling for good. The converter reads the
JSON as the webhook route does (:mod:`adapters.telegram.convert` drops what it cannot read),
so both ways in see the same payloads.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from telegram import Bot
from telegram.error import RetryAfter, TelegramError

from bot.logs import ThrottledLog
from bot.supervise.backoff import Backoff

log = logging.getLogger(__name__)

_READ_SLACK = 10.0
"""Seconds a ``getUpdates`` read may take beyond its long-polling timeout."""
CONFIRM_SECONDS = 3.0
"""The confirming ``getUpdates`` at stop gets this long (unconfirmed updates are only sent
again, and deduped)."""

Deliver = Callable[[dict[str, Any]], Awaitable[None]]
"""Hands one update (as JSON) over; raising means "not taken, fetch it again"."""


class Poller:
    """The ``getUpdates`` loop of one bot; run :meth:`run` as a task, cancel it to stop.

    Args:
        bot: An initialized PTB bot.
        deliver: Called with each update in order.
        timeout: Long-polling timeout in seconds.
        allowed_updates: Update types to ask Telegram for.
    """

    def __init__(
        self, *, bot: Bot, deliver: Deliver, timeout: float, allowed_updates: Sequence[str]
    ) -> None:
        self._bot = bot
        self._deliver = deliver
        self._timeout = dtm.timedelta(seconds=timeout)
        self._allowed = list(allowed_updates)
        self._net_backoff = Backoff(base=1.0, cap=30.0)
        self._sink_backoff = Backoff(base=0.5, cap=30.0)
        self._log = ThrottledLog(log, interval=30.0)
        self.offset = 0
        """The next update id to ask for: every update below it was taken by the sink."""

    async def run(self) -> None:
        try:
            while True:
                for update in await self._fetch():
                    if not await self._hand_over(update):
                        break  # fetch again from this update
        except asyncio.CancelledError:
            # The gateway stops: the getUpdates in flight is cancelled, not waited for (it
            # can be held up to ``timeout`` s); its updates stay unconfirmed, fetched again.
            log.info("stopping: telegram polling stopped (offset %d)", self.offset)
            raise

    async def confirm(self) -> None:
        """Tell Telegram which updates were taken (one short ``getUpdates`` with the offset).

        Without it Telegram would send the last batch again after a restart (harmless, the
        gateway dedupes, but noisy).
        """
        if not self.offset:
            return
        try:
            async with asyncio.timeout(CONFIRM_SECONDS):
                await self._get_updates(offset=self.offset, limit=1, timeout=0.0)
        except (TelegramError, TimeoutError) as err:
            log.warning("telegram: could not confirm updates below %d: %s", self.offset, err)

    async def _get_updates(
        self, *, offset: int | None, timeout: float, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """``getUpdates`` as JSON: the updates that carry an integer ``update_id``."""
        data: dict[str, Any] = {"offset": offset, "limit": limit, "timeout": int(timeout)}
        data["allowed_updates"] = self._allowed
        # PTB's get_updates parses the batch (see the module docstring); its ``_post`` is the
        # same request without the parsing. The read timeout outlasts the long poll.
        raw = await self._bot._post("getUpdates", data, read_timeout=timeout + _READ_SLACK)
        updates = [u for u in raw or () if isinstance(u, dict)]
        return [u for u in updates if isinstance(u.get("update_id"), int)]

    async def _fetch(self) -> Sequence[dict[str, Any]]:
        try:
            updates = await self._get_updates(
                offset=self.offset or None, timeout=self._timeout.total_seconds()
            )
        except RetryAfter as err:
            await asyncio.sleep(_seconds(err.retry_after))
            return ()
        except Exception as exc:  # network, 5xx, 409 from a second poller: back off, refetch
            delay = self._net_backoff.next()
            self._log.warning(
                "fetch", "telegram: getUpdates failed (%s: %s); retrying in %.1fs",
                type(exc).__name__, exc, delay,
            )  # fmt: skip
            await asyncio.sleep(delay)
            return ()
        self._net_backoff.reset()
        return updates

    async def _hand_over(self, update: dict[str, Any]) -> bool:
        try:
            await self._deliver(update)
        except Exception as exc:  # not taken: keep the offset here and fetch it again
            delay = self._sink_backoff.next()
            self._log.warning(
                "sink", "telegram: the gateway did not take update %d (%s: %s); "
                "fetching it again in %.1fs", update["update_id"], type(exc).__name__, exc, delay,
            )  # fmt: skip
            await asyncio.sleep(delay)
            return False
        self._sink_backoff.reset()
        self.offset = update["update_id"] + 1
        return True


def _seconds(value: int | dtm.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)
