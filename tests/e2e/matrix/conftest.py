"""Matrix end-to-end fixtures: the session's Synapse and nio-driven humans."""

from __future__ import annotations

import pytest

from tests.matrix_support import bot_user, make_human, register, synapse

pytestmark = pytest.mark.e2e

__all__ = ["bot_user", "make_human", "register", "synapse"]
