"""Redis-backed stores, one owner per structure (:mod:`bot.store.owner`), each built once
per process in :meth:`bot.deps.Deps.build`; other code reaches Redis through them (only
health probes and RQ's worker loop hold a client of their own). Sync by design: workers are
sync, and the gateway calls them in a thread (its outbox and progress readers and its
metrics writer are the async exceptions). RQ's own keys are touched beyond RQ's API only in
:mod:`bot.store.rq_layout`."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A Redis reply (bytes, or str with ``decode_responses``) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
