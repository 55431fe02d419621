"""Readiness as data: checks in, an HTTP status and a JSON body out (pure).

``/healthz`` answers 200 while the process serves at all. ``/readyz`` answers 200 only
when every check passes, else 503 with a body naming what is not ready::

    {"status": "not ready", "not_ready": ["redis"],
     "checks": {"redis": {"ok": false, "detail": "ConnectionError: ..."}, ...}}

Who may read them (:func:`authorized`): with ``FANBOT_OBSERVE__METRICS_TOKEN`` set,
``/metrics`` and ``/readyz`` need ``Authorization: Bearer <token>`` (they tell queue
depths, models and what is down); ``/healthz`` stays open, as a liveness probe tells
nothing (see docs/architecture.md, "Bounded growth and exposure").
"""

from __future__ import annotations

import hmac
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


PROTECTED_PATHS = frozenset({"/metrics", "/readyz"})
"""The endpoints the metrics token guards."""


def authorized(path: str, authorization: str | None, token: str | None) -> bool:
    """Whether a request for ``path`` with this ``Authorization`` header may be answered
    (``token``: the metrics token; None or empty: everyone may). Constant-time compare."""
    if not token or path not in PROTECTED_PATHS:
        return True
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


UNAUTHORIZED: dict[str, Any] = {"error": "unauthorized: send Authorization: Bearer <token>"}
