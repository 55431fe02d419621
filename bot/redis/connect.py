"""The Redis clients every process builds the same way, from ``FANBOT_REDIS_URL``.

One place turns the URL (see :mod:`bot.redis.url` for its forms: TCP, TLS, ACL user,
unix socket, Sentinel) into a client, sync for workers and stores, async for the gateway's
streams; nothing else in fanbot calls ``Redis.from_url``.

A Sentinel URL gives a client of the current master that finds the new one after a
failover: its pool asks the Sentinels again on each new connection, and the retries below
make a new connection whenever the old master shows it is no longer one. redis-py does
that for ``READONLY`` (a demoted master); fanbot's connections also do it for
``NOREPLICAS`` (a master whose replica was just promoted refuses writes when it runs with
``min-replicas-to-write``, which is what keeps a forced failover from losing writes; see
docs/operations.md) and ``UNBLOCKED`` (a blocking read cut off by the demotion).
"""

from __future__ import annotations

from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis import Redis
from redis.asyncio import sentinel as async_sentinel
from redis.backoff import ExponentialBackoff
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection

from bot.redis.url import SentinelTarget, is_sentinel, parse_sentinel

_C = TypeVar("_C", Redis, aioredis.Redis)

NO_SETINFO = None
"""``driver_info`` of the sync clients: no ``CLIENT SETINFO`` (redis-py names itself in two
round trips on each new connection, and every run's job process makes its connections
anew after the fork: four round trips before its first model request, for a label in
``CLIENT LIST``)."""

STALE_MASTER = ("NOREPLICAS", "UNBLOCKED")
"""Errors by which a master says a failover has begun or happened: go and ask again."""


def _stale(exc: redis.ResponseError) -> bool:
    return str(exc).startswith(STALE_MASTER)


class _Fresh:
    """A new socket's handshake goes without a health check first: the handshake itself
    shows the connection works (redis-py sends a ``PING`` before the ``HELLO`` of each
    new connection, one round trip more per connection, two per run's job process). The
    health check of a connection left idle stays."""

    def on_connect_check_health(self, check_health: bool = True) -> None:
        super().on_connect_check_health(check_health=False)  # type: ignore[misc]


class _FreshTCP(_Fresh, redis.Connection):
    pass


class _FreshTLS(_Fresh, redis.SSLConnection):
    pass


class _FreshUnix(_Fresh, redis.UnixDomainSocketConnection):
    pass


def _fresh_class(url: str) -> type[redis.Connection] | type[redis.UnixDomainSocketConnection]:
    """The sync connection class for a one-node ``url`` (TCP, TLS or unix socket)."""
    chosen = parse_url(url).get("connection_class")  # type: ignore[no-untyped-call]
    if chosen is not None and issubclass(chosen, redis.UnixDomainSocketConnection):
        return _FreshUnix
    if chosen is not None and issubclass(chosen, redis.SSLConnection):
        return _FreshTLS
    return _FreshTCP


class _FollowMaster(SentinelManagedConnection):
    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        # redis-py reconnects a dropped connection here to the host it had (the old master
        # after a failover) without asking the Sentinels (redis/redis-py#3874, open in 8.1);
        # connect() asks them.
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.ResponseError as exc:
            if not (_stale(exc) and self.connection_pool.is_master):
                raise
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"the master is failing over ({exc})") from None


class _FollowMasterTLS(_FollowMaster, SentinelManagedSSLConnection):
    pass


class _AsyncFollowMaster(async_sentinel.SentinelManagedConnection):
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:  # as in _FollowMaster
            await self.connect()  # type: ignore[no-untyped-call]
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except redis.ResponseError as exc:
            if not (_stale(exc) and self.connection_pool.is_master):
                raise
            await self.disconnect()
            raise redis.ConnectionError(f"the master is failing over ({exc})") from None


class _AsyncFollowMasterTLS(_AsyncFollowMaster, async_sentinel.SentinelManagedSSLConnection):
    pass


class _SentinelMaster(Redis):
    """The master's client; closing it also closes its connections to the Sentinels."""

    def close(self) -> None:
        super().close()
        pool: Any = self.connection_pool  # a SentinelConnectionPool
        for sentinel in pool.sentinel_manager.sentinels:
            sentinel.close()


class _AsyncSentinelMaster(aioredis.Redis):
    """The master's client; closing it also closes its connections to the Sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool: Any = self.connection_pool  # a SentinelConnectionPool
        for sentinel in pool.sentinel_manager.sentinels:
            await sentinel.aclose()


def connect(
    url: str,
    *,
    socket_timeout: float = 30,
    connect_timeout: float = 5,
    retries: int = 20,
    max_connections: int | None = None,
) -> Redis:
    """A sync client with bounded timeouts that retries on connection errors (a Redis
    restart or a Sentinel failover costs seconds, not a failed job); ``retries=0`` fails
    fast (doctor, preflight). ``max_connections``: the pool's bound (redis-py's default is
    100, and a pool past it raises rather than waits: a process whose many threads share
    the client sizes it to them)."""
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "health_check_interval": 15,
        "driver_info": NO_SETINFO,
    }
    if max_connections is not None:
        options["max_connections"] = max_connections
    if retries:
        options["retry"] = Retry(ExponentialBackoff(cap=2.0, base=0.1), retries=retries)
        options["retry_on_error"] = [redis.ConnectionError, redis.TimeoutError]
    if not is_sentinel(url):
        options["connection_class"] = _fresh_class(url)
    follow = (_SentinelMaster, _FollowMaster, _FollowMasterTLS)
    return _build(url, Redis, Sentinel, options, follow)


def connect_async(url: str, **options: Any) -> aioredis.Redis:
    """An async client for ``url`` with ``options`` (redis-py keyword arguments)."""
    follow = (_AsyncSentinelMaster, _AsyncFollowMaster, _AsyncFollowMasterTLS)
    return _build(url, aioredis.Redis, async_sentinel.Sentinel, options, follow)


def _build(
    url: str,
    client: type[_C],
    sentinel: type[Any],
    options: dict[str, Any],
    follow: tuple[type[_C], type[Any], type[Any]],
) -> _C:
    """``client`` for a one-node URL; for a Sentinel URL, ``follow``'s client class and its
    connection classes (plain, TLS) for the master."""
    if not is_sentinel(url):
        return client.from_url(url, **options)
    target = parse_sentinel(url)
    sockets = {k: v for k, v in options.items() if k.startswith("socket_")}
    tls: dict[str, Any] = {"ssl": True} if target.tls else {}
    sentinels = sentinel(
        list(target.sentinels), sentinel_kwargs={**sockets, **target.sentinel, **tls}, **options
    )
    master: _C = sentinels.master_for(
        target.service,
        redis_class=follow[0],
        connection_class=follow[2] if target.tls else follow[1],
        **node_options(target),
    )
    return master


def node_options(target: SentinelTarget) -> dict[str, Any]:
    """The master's connection options (credentials, db, TLS files) as redis-py parses
    them from a one-node URL."""
    parsed: dict[str, Any] = parse_url(target.node_url)  # type: ignore[no-untyped-call]
    return {k: v for k, v in parsed.items() if k not in ("host", "port", "connection_class")}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Connection:
    """The sync client itself, for what belongs to no one structure: a PING, a pipeline on
    which several owners queue writes for one round trip, this client's address, closing.

    Args:
        redis: The client every owner of this process shares.
    """

    def __init__(self, *, redis: Redis) -> None:
        self.redis = redis

    def ping(self) -> None:
        """Raises ``redis.RedisError`` (or ``OSError``) when Redis does not answer."""
        self.redis.ping()

    def batch(self, *, transaction: bool = True) -> redis.client.Pipeline:
        """A pipeline for owners' ``pipe=`` arguments; the caller executes it (``with``)."""
        return self.redis.pipeline(transaction=transaction)

    def config(self, *names: str) -> dict[str, str]:
        """The server's settings ``names`` (``CONFIG GET``; raises ``redis.ResponseError``
        where CONFIG is not allowed)."""
        found: dict[str, str] = {}
        for name in names:
            found.update({_text(k): _text(v) for k, v in self.redis.config_get(name).items()})
        return found

    def address(self) -> str:
        """``ip:port`` of this client's connection as Redis sees it (``""``: not said)."""
        return str(self.redis.client_info().get("addr", ""))

    def close(self) -> None:
        self.redis.close()
