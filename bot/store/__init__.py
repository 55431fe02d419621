"""Redis-backed stores, one owner per structure. Sync by design: workers are sync, and the
gateway calls them in a thread (its outbox and progress readers are the async exceptions)."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A Redis reply (bytes, or str with ``decode_responses``) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
