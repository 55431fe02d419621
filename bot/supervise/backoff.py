"""Exponential back-off with jitter, for loops that retry until the other side is back."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(kw_only=True)
class Backoff:
    """Delays of ``base, 2·base, 4·base …`` capped at ``cap``, each shortened by jitter.

    Jitter (up to ``jitter`` of the delay) keeps the adapters, and several gateways, from
    retrying in lock-step when Redis comes back. :meth:`reset` after a success.

    Attributes:
        base: First delay in seconds.
        cap: Longest delay in seconds.
        jitter: Fraction of each delay that may be taken off at random (0 = none).
    """

    base: float = 0.5
    cap: float = 30.0
    jitter: float = 0.2
    failures: int = field(default=0, init=False)

    def next(self) -> float:
        """The delay before the next attempt (and count one more failure)."""
        delay = min(self.cap, self.base * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return delay * (1 - self.jitter * random.random())

    def reset(self) -> None:
        self.failures = 0
