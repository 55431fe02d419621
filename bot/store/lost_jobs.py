"""Jobs RQ lost: when each was first seen lost, so a sweep on any host can tell how long."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from bot.store import as_text
from bot.store.owner import RedisOwner


class LostJobs(RedisOwner):
    """Owner of ``jobs:lost``: when each lost job was first seen, across sweeps and hosts."""

    def since(self) -> dict[str, float]:
        """Job id -> first sighting."""
        pairs = cast(
            "list[tuple[bytes, float]]",
            self.redis.zrange(self.keys.lost_jobs, 0, -1, withscores=True),
        )
        return {as_text(member): float(score) for member, score in pairs}

    def remember(self, first_seen: Mapping[str, float]) -> None:
        """Replace the record with the jobs still lost (the rest were found or repaired)."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self.keys.lost_jobs)
            if first_seen:
                pipe.zadd(self.keys.lost_jobs, dict(first_seen))
            pipe.execute()
