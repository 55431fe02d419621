"""What every Redis owner keeps: its client, the key builder, and its Lua scripts.

An owner (one per structure, see :mod:`bot.store`) subclasses :class:`RedisOwner` (sync
client) or :class:`AsyncRedisOwner` (the gateway's async client) and declares each script
it runs as a class attribute, ``_claim = Lua(_CLAIM)``: the script is registered with the
owner's client on first use (no round trip; redis-py loads it at its first ``EVALSHA``).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis

from bot.keys import Keys


class Lua:
    """A Lua script of an owner, bound to the owner's client on first use.

    Args:
        text: The script.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        script = obj.redis.register_script(self.text)
        obj.__dict__[self.name] = script  # bound once: later reads find it on the instance
        return script


class RedisOwner:
    """Base of the sync owners.

    Args:
        redis: Sync client (``decode_responses`` off).
        keys: Key builder.
    """

    def __init__(self, *, redis: redis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys


class AsyncRedisOwner:
    """Base of the gateway's async readers.

    Args:
        redis: Async client with ``decode_responses=True``.
        keys: Key builder.
    """

    def __init__(self, *, redis: aioredis.Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
