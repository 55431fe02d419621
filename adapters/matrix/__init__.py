"""The Matrix channel on matrix-nio: rooms and threads as sessions, optional encryption.

``build(settings)`` is what the gateway wiring calls when ``settings.matrix.configured``.
The store path (``FANBOT_MATRIX__STORE_PATH``, default ``<state_dir>/matrix``) keeps the
device id, the sync token and, with encryption, nio's key store.
"""

from __future__ import annotations

from pathlib import Path

from adapters.matrix.channel import MatrixChannel
from bot.config import Settings


def build(settings: Settings) -> MatrixChannel:
    """The Matrix adapter for ``settings`` (not started)."""
    matrix = settings.matrix
    store = Path(matrix.store_path) if matrix.store_path else settings.state_dir / "matrix"
    return MatrixChannel(settings=matrix, store_path=store, attachments=settings.attachments)


__all__ = ["MatrixChannel", "build"]
