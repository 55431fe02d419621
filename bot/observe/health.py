"""Readiness as data: checks in, an HTTP status and a JSON body out (pure).

``/healthz`` answers 200 while the process serves at all. ``/readyz`` answers 200 only
when every check passes, else 503 with a body naming what is not ready::

    {"status": "not ready", "not_ready": ["redis"],
     "checks": {"redis": {"ok": false, "detail": "ConnectionError: ..."}, ...}}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bot.redis.connect import Connection


@dataclass(frozen=True, kw_only=True)
class Check:
    """One readiness condition: its name, whether it holds, and why not."""

    name: str
    ok: bool
    detail: str = ""


def verdict(checks: Sequence[Check]) -> tuple[int, dict[str, Any]]:
    """The ``/readyz`` status code and JSON body for ``checks``."""
    failing = [c.name for c in checks if not c.ok]
    body: dict[str, Any] = {
        "status": "not ready" if failing else "ready",
        "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in checks},
    }
    if failing:
        body["not_ready"] = failing
    return (503 if failing else 200), body


ALIVE: dict[str, Any] = {"status": "alive"}


def redis_check(connection: Connection) -> Check:
    """Redis answers a PING (sync: the worker's endpoint thread)."""
    try:
        connection.ping()
    except (redis.RedisError, OSError) as exc:
        return Check(name="redis", ok=False, detail=f"{type(exc).__name__}: {exc}")
    return Check(name="redis", ok=True)
