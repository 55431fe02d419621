"""Wait for a condition instead of sleeping and hoping it happened.

A test that sleeps a fixed time to let something happen is slow when the machine is idle
and flaky when it is busy. Poll the condition instead, with a deadline that only a real
failure reaches::

    await until(lambda: len(channel.announces) == 3)      # in async tests
    wait_until(lambda: fake.in_flight == 1, timeout=5)    # in sync tests and threads

Both return the condition's first truthy value, so ``[msg] = await until(lambda:
channel.announces)`` waits and unpacks in one line.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

T = TypeVar("T")

__all__ = ["until", "wait_until"]


def _timed_out(timeout: float, message: str | None) -> TimeoutError:
    return TimeoutError(message or f"condition not met within {timeout:g}s")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    every: float = 0.02,
    message: str | None = None,
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Blocking; for sync tests and threads (in a coroutine use :func:`until`).

    Args:
        condition: Checked at once, then every ``every`` seconds.
        timeout: Seconds before giving up.
        every: Seconds between checks.
        message: The ``TimeoutError``'s message (default: says how long it waited).

    Raises:
        TimeoutError: The condition stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        time.sleep(every)


async def until(
    condition: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 30.0,
    every: float = 0.02,
    message: str | None = None,
) -> T:
    """:func:`wait_until` in a coroutine: ``condition`` may return an awaitable, and the
    event loop runs between checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        result = cast(T, await value if inspect.isawaitable(value) else value)
        if result:
            return result
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, message)
        await asyncio.sleep(every)
