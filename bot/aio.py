"""Stopping asyncio tasks that run client-library code.

One ``task.cancel()`` is not always enough: a library can turn the cancellation into its
own timeout and retry (aiohttp's timer does when the timeout and the cancel meet, and
nio retries a timed-out request), so the task runs on and ``await task`` never returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["cancel_all"]


async def cancel_all(tasks: Iterable[asyncio.Task[Any]], *, every: float = 1.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again every ``every`` seconds
    until each is done; their exceptions (and cancellations) are not raised."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)
