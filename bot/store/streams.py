"""Writers for the outbox and progress streams (kept for their callers).

Each stream has one owner module: :mod:`bot.store.outbox` and :mod:`bot.store.progress`.
"""

from __future__ import annotations

from bot.store.outbox import put_outbound
from bot.store.progress import PROGRESS_MAXLEN, ProgressEvent, put_progress

__all__ = ["PROGRESS_MAXLEN", "ProgressEvent", "put_outbound", "put_progress"]
