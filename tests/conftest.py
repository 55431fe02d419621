"""Shared fixtures: one private redis-server per test session, flushed between tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(data_dir=Path(tmp_path_factory.mktemp("redis")))
    with server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture
def rconn(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
