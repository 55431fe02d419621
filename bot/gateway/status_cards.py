"""Progress: one status message per run, edited at most every few seconds.

Reads the capped progress stream from "now" (progress is ephemeral: a restarted gateway
picks up with the next event). The status message's platform id is kept in Redis
(:class:`bot.store.progress.ProgressStore`) so a restarted gateway edits the same
message instead of posting a new one.

A card reads as learn-claude-code's progress lines (type tag, tool count and time as the run
goes, a final tally); a run that ends quietly (``ANNOUNCE_SKIP``) has its card deleted where the
adapter can (:class:`~bot.ports.DeletingChannel`), else edited to a neutral line.

A card is finished when the announce lands: given egress's ``announcing``, the final edit
waits until the card's thread has had nothing queued or in flight for
:data:`QUIET_SECONDS` (runs ending together announce meanwhile), up to
:data:`ANNOUNCES_FIRST_SECONDS`, so announces do not queue behind cosmetic edits for the
platform and the gateway's time. Final edits go out one at a time, as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from bot.errors import DeliveryError
from bot.gateway.egress import reraise_if_cancelling
from bot.keys import Keys
from bot.ports import DeletingChannel, OutboundChannel
from bot.runs.naming import Icon, icon
from bot.runs.progress_lines import tally
from bot.store.progress import ProgressEvent, ProgressStore
from bot.supervise.aio import cancel_all
from bot.types import Outbound, OutboundKind, ThreadRef

log = logging.getLogger(__name__)

ANNOUNCES_FIRST_SECONDS = 5.0  # longest a card's final edit waits for its thread's announces
QUIET_SECONDS = 0.2  # a thread without announces for this long has none coming right now


def status_text(
    title: str,
    text: str,
    *,
    final: bool,
    tools: int | None = None,
    elapsed: float | None = None,
    note: str = "",
) -> str:
    """A status card's text (pure), as learn-claude-code's progress lines::

        ⏳ [explore] Subagent #2 "Research" — step 3 · 🔧 search · 1200 tokens · 5 tools, 3.2s
        ✅ [explore] Subagent #2 "Research" — success (8 tools, 5.1s)

    The tally is left out while the run has not counted anything (``tools`` or
    ``elapsed`` None). A ``note`` follows a working run's line: a budget warning gets the
    warning icon; a note that starts with an icon of its own (``↻ resumed after a worker
    was lost (1×)``) keeps it.
    """
    counts = None if tools is None or elapsed is None else tally(tools, elapsed)
    if final:
        return f"{icon(text)} {title} — {text}" + (f" ({counts})" if counts else "")
    line = f"{Icon.WORKING} {title} — {text}" + (f" · {counts}" if counts else "")
    if not note:
        return line
    return line + (f" · {Icon.WARNING} {note}" if note[0].isalnum() else f" · {note}")


def quiet_text(title: str) -> str:
    """What a quietly ended run's card says where it cannot be removed (pure)."""
    return f"{title} — done, nothing to announce"


def moved_text(title: str) -> str:
    """What a card says where it cannot be removed once its run got a thread of its own."""
    return f"{title} — continues in its own thread"


@dataclass(kw_only=True)
class _RunStatus:
    thread: ThreadRef
    title: str
    message_id: str | None = None
    last_edit: float = 0.0
    pending: str | None = None
    shown: str | None = None  # the card's text as last posted
    flush: asyncio.Task[None] | None = field(default=None, repr=False)


class ProgressRenderer:
    """Turns progress events into status messages.

    Args:
        redis: Async client (``decode_responses=True``).
        keys: Key builder.
        adapters: Adapter per platform.
        min_interval: Seconds between two edits of one status message.
        card_of: ``run_id -> ("#2 Research", its thread now)`` (one read of the run
            record). A thread-bound run that started before the gateway opened its thread
            sends its first events with the parent thread; its card goes where the run is
            now (None: where the events say).
        announcing: ``thread -> event`` set once egress has nothing queued or in flight for
            the thread (``None``: nothing now); final edits wait for it. Without it they
            are made at once.
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: Keys,
        adapters: Mapping[str, OutboundChannel],
        min_interval: float,
        card_of: Callable[[str], tuple[str, ThreadRef | None]],
        announcing: Callable[[ThreadRef], asyncio.Event | None] | None = None,
    ) -> None:
        self.store = ProgressStore(redis=redis, keys=keys)
        self.adapters = adapters
        self.min_interval = min_interval
        self.card_of = card_of
        self.announcing = announcing
        self._runs: dict[str, _RunStatus] = {}
        self._finishing: set[asyncio.Task[None]] = set()
        self._finals = asyncio.Lock()  # final edits one at a time

    async def run(self) -> None:
        last_id = "$"
        while True:
            try:
                events = await self.store.read(last_id)
                for entry_id, event in events:
                    last_id = entry_id
                    if event is not None:
                        await self._on_event(event)
            except (aioredis.ConnectionError, aioredis.TimeoutError, OSError):
                reraise_if_cancelling()
                await asyncio.sleep(1.0)

    async def _on_event(self, event: ProgressEvent) -> None:
        run_id, final = event.run_id, event.final
        state = self._runs.get(run_id)
        if state is None:
            title, now = await asyncio.to_thread(self.card_of, run_id)
            thread = now or event.thread
            known = await self.store.status_message(run_id)
            state = self._runs[run_id] = _RunStatus(thread=thread, title=title)
            state.message_id = known
        elif final and event.thread != state.thread:  # its thread was opened meanwhile
            await self.rebind(run_id, event.thread, show=False)
        text = status_text(
            state.title,
            event.text,
            final=final,
            tools=event.tools,
            elapsed=event.elapsed,
            note=event.note,
        )
        if final:
            if state.flush:
                state.flush.cancel()
            self._runs.pop(run_id, None)
            if self.announcing is None:
                await self._finish(run_id, state, text, quiet=event.quiet)
            else:  # the loop goes on with other cards meanwhile
                task = asyncio.create_task(
                    self._finish_after(self.announcing, run_id, state, text, event)
                )
                self._finishing.add(task)
                task.add_done_callback(self._finishing.discard)
            return
        wait = state.last_edit + self.min_interval - time.monotonic()
        if state.message_id is None or wait <= 0:
            await self._show(run_id, state, text)
            return
        state.pending = text
        if state.flush is None or state.flush.done():
            state.flush = asyncio.create_task(self._flush_later(run_id, state, wait))

    async def rebind(self, run_id: str, thread: ThreadRef, *, show: bool = True) -> None:
        """``run_id`` has a thread of its own now: its card moves there (the old one is
        deleted, or says where the run went) and is posted again with ``show``."""
        state = self._runs.get(run_id)
        if state is None or state.thread == thread:
            return
        old = _RunStatus(thread=state.thread, title=state.title, message_id=state.message_id)
        state.thread, state.message_id = thread, None
        if old.message_id is None:
            return
        await self._remove(run_id, old, fallback=moved_text(old.title))
        if show and state.shown is not None:
            await self._show(run_id, state, state.shown)

    async def _finish_after(
        self,
        announcing: Callable[[ThreadRef], asyncio.Event | None],
        run_id: str,
        state: _RunStatus,
        text: str,
        event: ProgressEvent,
    ) -> None:
        """Finish the card once its thread's announces are out (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ANNOUNCES_FIRST_SECONDS
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(QUIET_SECONDS, left))
            busy = announcing(state.thread)
            if busy is None:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(busy.wait(), max(0.0, deadline - loop.time()))
        async with self._finals:
            await self._finish(run_id, state, text, quiet=event.quiet)

    async def _finish(self, run_id: str, state: _RunStatus, text: str, *, quiet: bool) -> None:
        if quiet:
            await self._remove(run_id, state)
        else:
            await self._show(run_id, state, text)

    async def _flush_later(self, run_id: str, state: _RunStatus, wait: float) -> None:
        await asyncio.sleep(wait)
        if state.pending is not None and run_id in self._runs:
            await self._show(run_id, state, state.pending)

    async def _show(self, run_id: str, state: _RunStatus, text: str) -> None:
        adapter = self.adapters.get(state.thread.platform)
        if adapter is None:
            return
        state.pending = None
        state.last_edit = time.monotonic()
        state.shown = text
        try:
            if state.message_id is None:
                status = Outbound(thread=state.thread, text=text, kind=OutboundKind.STATUS)
                ids = await adapter.send(status)
                if ids:
                    state.message_id = ids[0]
                    await self.store.remember_status(run_id, ids[0])
            else:
                await adapter.edit(state.thread, state.message_id, text)
        except DeliveryError as exc:  # progress is best effort; the announce is not
            log.info("status update for %s skipped: %s", run_id[:8], exc)
        except Exception:
            log.warning("status update for %s failed", run_id[:8], exc_info=True)

    async def _remove(self, run_id: str, state: _RunStatus, *, fallback: str = "") -> None:
        """End a quiet run's card: delete it, else edit it to a neutral line (``fallback``,
        else :func:`quiet_text`); a run without a card gets none."""
        adapter = self.adapters.get(state.thread.platform)
        if adapter is None or state.message_id is None:
            return
        try:
            if isinstance(adapter, DeletingChannel):
                try:
                    await adapter.delete(state.thread, state.message_id)
                    return
                except DeliveryError as exc:
                    log.info("status card of %s not deleted (%s); editing it", run_id[:8], exc)
            await adapter.edit(state.thread, state.message_id, fallback or quiet_text(state.title))
        except DeliveryError as exc:  # best effort, as every status update
            log.info("status card of %s not ended: %s", run_id[:8], exc)
        except Exception:
            log.warning("status card of %s not ended", run_id[:8], exc_info=True)

    async def close(self) -> None:
        flushes = [s.flush for s in self._runs.values() if s.flush is not None]
        await cancel_all([*flushes, *self._finishing])
        self._runs.clear()
