"""The sync clients fanbot builds open a connection without naming the library: every
run's job process makes its connections anew after the fork, and ``CLIENT SETINFO`` would
cost two round trips on each before the run's first model request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from bot.redis.connect import connect


def sent_by_a_new_client(
    redis_url: str, make: Callable[[str], redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The commands a fresh client sends for its first ``PING`` (handshake included)."""
    sent: list[str] = []
    original = AbstractConnection.send_command

    def record(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        sent.append(" ".join(str(a) for a in args[:2]))
        original(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(AbstractConnection, "send_command", record)
        client = make(redis_url)
        assert client.ping()
        client.close()
    return sent


def test_a_new_connection_names_no_library_before_its_first_command(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = sent_by_a_new_client(redis_url, connect, monkeypatch)
    assert "HELLO 3" in ours and not any(c.startswith("CLIENT") for c in ours), ours
    default = sent_by_a_new_client(redis_url, redis.Redis.from_url, monkeypatch)
    assert default.count("CLIENT SETINFO") == 2, default  # what redis-py does by itself


def test_a_new_connection_sends_no_health_check_before_its_handshake(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def first_get(url: str) -> redis.Redis:
        client = connect(url)
        client.get("k")
        return client

    ours = sent_by_a_new_client(redis_url, first_get, monkeypatch)
    assert ours == ["HELLO 3", "GET k", "PING"], ours  # the PING: the helper's own
    with_check = sent_by_a_new_client(
        redis_url, lambda u: redis.Redis.from_url(u, health_check_interval=15), monkeypatch
    )
    assert with_check[:2] == ["HELLO 3", "PING"], with_check  # what redis-py does by itself
