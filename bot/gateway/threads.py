"""Egress's side of thread-bound children: open the thread an ``open_thread`` entry asks
for, through the adapter's :class:`~bot.ports.ThreadOpener`, and record the outcome
(:mod:`bot.runs.threads`).

Opening is at least once: a gateway that dies after the platform opened the thread and
before the binding was recorded opens another one on redelivery (the first stays empty).
A request whose binding is already settled (or closed) opens nothing. Once a bound run's
announce is posted, :meth:`ThreadOpenings.announced` queues its copy for the parent thread.
"""

from __future__ import annotations

import asyncio
import logging

from bot.deps import Deps
from bot.errors import DeliveryError
from bot.ports import OpenedThread, OutboundChannel, ThreadOpener
from bot.runs.threads import bindings, copy_to_parent, run_of_open_key, thread_opened
from bot.store.threads import BindState
from bot.types import Outbound, OutboundKind, ThreadRef

log = logging.getLogger(__name__)


class ThreadOpenings:
    """Opens children's threads for egress (its sync stores run in a worker thread)."""

    def __init__(self, *, deps: Deps) -> None:
        self.deps = deps

    async def open(self, adapter: OutboundChannel, message: Outbound) -> list[str]:
        """Settle one ``open_thread`` entry; returns the ids egress records for it."""
        run_id = run_of_open_key(message.idempotency_key)
        found = await asyncio.to_thread(bindings(self.deps).for_run, run_id)
        if found is None or found.state != BindState.PENDING:
            return [_id_of(found.child if found else None, "settled")]
        opened, note = await self._try_open(adapter, message)
        await asyncio.to_thread(
            thread_opened,
            self.deps,
            run_id,
            thread=opened.thread if opened else None,
            link=opened.link if opened else "",
            note=note,
        )
        return [_id_of(opened.thread if opened else None, "unavailable")]

    async def announced(self, message: Outbound) -> None:
        """``message`` is posted: a thread-bound run's announce is copied to its parent."""
        if message.kind is OutboundKind.ANNOUNCE:
            await asyncio.to_thread(copy_to_parent, self.deps, message)

    async def _try_open(
        self, adapter: OutboundChannel, message: Outbound
    ) -> tuple[OpenedThread | None, str]:
        if not isinstance(adapter, ThreadOpener):
            return None, f"{adapter.platform} cannot open threads"
        try:
            return await adapter.open_thread(message.thread, message.text), ""
        except DeliveryError as exc:
            if not exc.permanent:
                raise  # egress retries it like a failed post
            log.info("no thread of its own for %s: %s", message.idempotency_key, exc)
            return None, str(exc)


def _id_of(thread: ThreadRef | None, otherwise: str) -> str:
    return (thread.thread if thread else None) or otherwise
