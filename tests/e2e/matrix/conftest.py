"""Matrix end-to-end fixtures: the session's Synapse and nio-driven humans."""

from __future__ import annotations

from tests.matrix_support import bot_user, make_human, register, synapse

__all__ = ["bot_user", "make_human", "register", "synapse"]
