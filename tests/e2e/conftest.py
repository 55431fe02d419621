"""End-to-end fixtures: the fake model plus settings values for a Stack on the test Redis."""

from __future__ import annotations

from typing import Any


def stack_values(redis_url: str, base_url: str, **extra: Any) -> dict[str, Any]:
    """Settings for a Stack: fast heartbeats and edits, the fake model, the test Redis."""
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "openai": {"base_url": base_url, "model": "fake-model", "max_retries": 2},
        # Fan-in has its own tests (test_fan_in.py); these scripts answer every user
        # message, a continuation's too, by spawning, so they run with announce cards.
        "subagents": {"heartbeat_seconds": 0.5, "stale_after_seconds": 3, "announce": "cards"},
        "gateway": {
            "progress_edit_seconds": 0.5,
            "reclaim_idle_seconds": 2,
            "alive_ttl_seconds": 2,
        },
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values
