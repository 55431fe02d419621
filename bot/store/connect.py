"""The sync Redis client every process builds the same way (bounded timeouts, retries)."""

from __future__ import annotations

import redis
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry


def connect(url: str, *, socket_timeout: float = 30) -> Redis:
    """A sync client with bounded timeouts that retries on connection errors (a Redis
    restart costs a few hundred milliseconds, not a failed job)."""
    return Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=20),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
