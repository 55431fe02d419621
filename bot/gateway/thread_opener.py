"""Egress's side of thread-bound children: open the thread an ``open_thread`` entry asks
for, through the adapter's :class:`~bot.ports.ThreadOpener`, and record the outcome
(:mod:`bot.runs.thread_children`).

Opening is at least once: a gateway that dies after the platform opened the thread and
before the binding was recorded opens another one on redelivery (the first stays empty).
A request whose binding is already settled (or closed) opens nothing. Once a bound run's
announce is posted, :meth:`ThreadOpenings.announced` queues its copy for the parent thread
(:func:`~bot.runs.thread_children.copy_to_parent`, its copy read ahead by
:meth:`ThreadOpenings.parent_copy`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from bot.deps import Deps
from bot.errors import DeliveryError
from bot.ports import OpenedThread, OutboundChannel, ThreadOpener
from bot.runs.thread_children import parent_announce, run_of_open_key, thread_opened
from bot.store.threads import BindState
from bot.types import Outbound, OutboundKind, ThreadRef

log = logging.getLogger(__name__)


class ThreadOpenings:
    """Opens children's threads for egress (its sync stores run in a worker thread)."""

    def __init__(
        self,
        *,
        deps: Deps,
        on_bound: Callable[[str, ThreadRef], Awaitable[None]] | None = None,
    ) -> None:
        self.deps = deps
        # Told when a run got its thread (the gateway moves the run's status card there).
        self.on_bound = on_bound

    async def open(self, adapter: OutboundChannel, message: Outbound) -> list[str]:
        """Settle one ``open_thread`` entry; returns the ids egress records for it."""
        run_id = run_of_open_key(message.idempotency_key)
        found = await asyncio.to_thread(self.deps.thread_bindings.for_run, run_id)
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
        if opened is not None and self.on_bound is not None:
            await self.on_bound(run_id, opened.thread)
        return [_id_of(opened.thread if opened else None, "unavailable")]

    async def parent_copy(self, message: Outbound) -> Outbound | None:
        """The copy a thread-bound run's announce makes for its parent thread, if any. Egress
        reads it while the announce waits for its turn, so none of its threads' posts wait
        for the read; the binding it depends on was settled before the announce was written
        (the announce is addressed to the child's thread)."""
        if message.kind is not OutboundKind.ANNOUNCE:
            return None
        return await asyncio.to_thread(parent_announce, self.deps, message)

    async def announced(self, copy: Outbound) -> None:
        """The announce is posted: queue its ``copy`` for the parent thread (before the
        announce is recorded delivered, so a crash in between queues it again)."""
        await asyncio.to_thread(self.deps.outbox.put, copy)

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
