"""Fixtures for the Matrix adapter tests (real Synapse, started once per session)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.matrix import MatrixChannel
from tests.matrix_support import bot_user, make_human, register, synapse

__all__ = ["bot_user", "make_human", "register", "synapse"]


@pytest.fixture
async def adapters() -> AsyncIterator[list[MatrixChannel]]:
    """Adapters a test started; stopped at teardown even when the test failed."""
    started: list[MatrixChannel] = []
    yield started
    for adapter in started:
        await adapter.stop()
