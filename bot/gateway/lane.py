"""One thread's lane: its outbox entries reach the platform in order, back to back.

Egress hands every entry of a thread to that thread's :class:`Lane`. The lane works on up
to :data:`AHEAD` entries at once, so what an entry needs before its post (observing it and
taking its sending lock) is done while the entries before it are posted. What keeps the
order is each entry's :class:`Turn`: an entry posts only once the entry before it is
settled (posted and recorded delivered, or acknowledged without a post: delivered
elsewhere, dead-lettered, given up). A retried or rate-limited entry therefore still holds
back the rest of its thread, and only its thread; and at any instant at most one entry of
a thread is between its post and its record, so a crash leaves at most that one in doubt,
as when entries went one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from bot.supervise.aio import cancel_all

__all__ = ["AHEAD", "Lane", "Turn"]

AHEAD = 8  # entries of one thread worked on at once (each holds its sending lock)
T = TypeVar("T")


class Turn:
    """An entry's place in its lane.

    Args:
        before: Set once the entry before this one may be followed (``None``: first).
    """

    def __init__(self, before: asyncio.Event | None = None) -> None:
        self._before = before
        self.passed = asyncio.Event()

    async def wait(self) -> None:
        """Until the entry before this one was settled (or abandoned)."""
        if self._before is not None:
            await self._before.wait()
            self._before = None  # a long lane must not chain every event it ever made

    def release(self) -> None:
        """Let the next entry post (this one was settled or abandoned)."""
        self.passed.set()


class Lane(Generic[T]):
    """Delivers one thread's entries in order, up to :data:`AHEAD` at a time.

    Args:
        deliver: Settles one entry; must release its turn by the time it returns.
        closing: True once the gateway stops (entries not started stay pending).
        idle_seconds: The lane ends after this long with nothing queued or in flight.
        on_idle: Called just before the lane ends (synchronously: no entry can slip in).
    """

    def __init__(
        self,
        *,
        deliver: Callable[[T, Turn], Coroutine[Any, Any, None]],
        closing: Callable[[], bool],
        idle_seconds: float,
        on_idle: Callable[[], None],
    ) -> None:
        self._deliver = deliver
        self._closing = closing
        self._idle_seconds = idle_seconds
        self._on_idle = on_idle
        self._queue: asyncio.Queue[T] = asyncio.Queue()
        self._window: set[asyncio.Task[None]] = set()
        self._last: asyncio.Event | None = None
        self.idle = asyncio.Event()
        """Set while nothing is queued or in flight."""
        self.idle.set()

    def put(self, item: T) -> None:
        self.idle.clear()
        self._queue.put_nowait(item)

    async def run(self) -> None:
        """Start each entry as it comes (and a window slot is free) until idle or closing."""
        try:
            while not self._closing():
                try:
                    item = await asyncio.wait_for(self._queue.get(), self._idle_seconds)
                except TimeoutError:
                    if self._queue.empty() and not self._window:
                        self._on_idle()
                        return
                    continue
                if self._closing():  # left pending; the next gateway takes it over
                    break
                self._start(item)
                if len(self._window) >= AHEAD:
                    await asyncio.wait(self._window, return_when=asyncio.FIRST_COMPLETED)
            if self._window:  # sends in flight finish; the rest see the gateway closing
                await asyncio.wait(self._window)
        finally:  # cancelled: what is still in flight stays pending
            await cancel_all(list(self._window))

    def _start(self, item: T) -> None:
        turn = Turn(self._last)
        self._last = turn.passed
        task = asyncio.create_task(self._deliver(item, turn))
        self._window.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._window.discard(task)
        if not self._window and self._queue.empty():
            self.idle.set()
