"""Short leases that let one process of many do a periodic job (``lock:reaper``)."""

from __future__ import annotations

from bot.store.owner import RedisOwner


class Leases(RedisOwner):
    """Owner of the maintenance lease."""

    def take_maintenance(self, *, seconds: float) -> bool:
        """True if no other host swept within the last ``seconds`` (this one sweeps now)."""
        return bool(
            self.redis.set(self.keys.reaper_lock, "1", nx=True, px=max(1, int(seconds * 1000)))
        )
