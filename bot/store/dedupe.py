"""Inbound de-duplication: each platform event id is handled once (``SET NX EX``)."""

from __future__ import annotations

import redis

from bot.keys import Keys


class Dedupe:
    """Owner of the ``dedupe:{platform}:{eventId}`` markers.

    Args:
        redis: Sync client.
        keys: Key builder.
    """

    def __init__(self, *, redis: redis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def first_time(self, platform: str, event_id: str, *, ttl: int) -> bool:
        """True the first time ``event_id`` is seen within ``ttl`` seconds."""
        return bool(self.redis.set(self.keys.dedupe(platform, event_id), "1", nx=True, ex=ttl))

    def forget(self, platform: str, event_id: str) -> None:
        """Let a redelivery of ``event_id`` through (its handling did not complete)."""
        self.redis.delete(self.keys.dedupe(platform, event_id))
