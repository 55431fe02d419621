"""Short leases that let one process of many do a periodic job (``lock:reaper``)."""

from __future__ import annotations

import redis

from bot.keys import Keys


class Leases:
    """Owner of the maintenance lease.

    Args:
        redis: Sync client.
        keys: Key builder.
    """

    def __init__(self, *, redis: redis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def take_maintenance(self, *, seconds: float) -> bool:
        """True if no other host swept within the last ``seconds`` (this one sweeps now)."""
        return bool(
            self.redis.set(self.keys.reaper_lock, "1", nx=True, px=max(1, int(seconds * 1000)))
        )
