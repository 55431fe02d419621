from pathlib import Path

import redis

from bot.redis.server import RedisServer


def test_private_redis_keeps_data_across_restart(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path / "r")
    with server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
    with server:
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        client.close()
