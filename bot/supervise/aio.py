"""Stopping asyncio tasks that run client-library code, and the threads they started.

One ``task.cancel()`` is not always enough: a library can turn the cancellation into its
own timeout and retry (aiohttp's timer does when the timeout and the cancel meet, and
nio retries a timed-out request), so the task runs on and ``await task`` never returns.

Cancelling a task that waits in ``asyncio.to_thread`` does not stop the thread: its call
goes on, and the process cannot exit before it returns. :class:`TrackedExecutor` says when
no such call is left, so a process can wait for them before it takes away what they use
(a private Redis: a call cut off from it retries for half a minute).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["TrackedExecutor", "cancel_all"]


async def cancel_all(tasks: Iterable[asyncio.Task[Any]], *, every: float = 1.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again every ``every`` seconds
    until each is done; their exceptions (and cancellations) are not raised."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)


class TrackedExecutor(ThreadPoolExecutor):
    """A thread pool that knows how many of its calls have not returned yet (set it as the
    loop's default executor to cover ``asyncio.to_thread``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()
        self._busy = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._lock:
            self._busy += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self._lock:
            self._busy -= 1

    @property
    def busy(self) -> int:
        """Calls submitted that have not returned (or been cancelled) yet."""
        return self._busy

    async def idle(self, timeout: float, *, poll: float = 0.02) -> bool:
        """Wait until no call is left, at most ``timeout`` s; whether none is."""
        deadline = time.monotonic() + timeout
        while self._busy and time.monotonic() < deadline:
            await asyncio.sleep(poll)
        return not self._busy
