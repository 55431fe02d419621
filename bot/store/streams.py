"""Writers for the outbox and progress streams (readers live in the gateway)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from bot.keys import Keys
from bot.types import Outbound, ThreadRef

PROGRESS_MAXLEN = 10_000


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    """One step of a run, rendered by the gateway as that run's status line."""

    run_id: str
    thread: ThreadRef
    text: str
    final: bool = False


def put_outbound(client: redis.Redis, keys: Keys, message: Outbound) -> str:
    """Queue ``message`` for delivery; returns the stream entry id."""
    entry = client.xadd(keys.outbox, {"data": json.dumps(message.to_json())})
    return entry.decode() if isinstance(entry, bytes) else str(entry)


def put_progress(client: redis.Redis, keys: Keys, event: ProgressEvent) -> None:
    """Append a progress event to its capped stream (a flood never delays announces)."""
    client.xadd(
        keys.progress,
        {
            "run_id": event.run_id,
            "thread": json.dumps(event.thread.to_json()),
            "text": event.text,
            "final": "1" if event.final else "",
            "ts": str(time.time()),
        },
        maxlen=PROGRESS_MAXLEN,
        approximate=True,
    )
