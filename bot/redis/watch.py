"""Every long-running process says when Redis is unreachable and when it is back.

At start-up :func:`wait_until_reachable` blocks until Redis answers, with one line per
back-off step naming the server (``host:port``, the socket, or the Sentinels; never a
password), so a gateway or worker started before Redis, or pointed at the wrong one, says
so at once instead of sitting silent. While running, :class:`RedisWatch` (a daemon thread
with its own client) writes a short-lived key every second and does the same for an
outage (a master refusing writes during a failover is one), ending it with
``Redis at <where> reachable again``. Wrong credentials are a configuration mistake, not an
outage: they stop the start-up with :class:`~bot.errors.ConfigError`.

:class:`Reachability` decides what to say; the functions around it do the pinging.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import redis

from bot.errors import ConfigError
from bot.redis.connect import connect
from bot.redis.url import address
from bot.supervise.backoff import Backoff

log = logging.getLogger("fanbot.redis")

PING_TIMEOUT = 2.0
WATCH_INTERVAL = 1.0
PROBE_TTL_MS = 5_000
_WHY_MAX = 300


@dataclass(kw_only=True)
class Reachability:
    """What one process says about one Redis, attempt after attempt (no I/O).

    Attributes:
        who: The process, first on each line (``gateway``, ``worker pid 12``).
        where: The server as :func:`bot.redis.url.address` names it.
        backoff: Delays between attempts while it is unreachable.
    """

    who: str
    where: str
    backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, cap=30.0))
    down: bool = False

    def failed(self, why: str) -> tuple[str, float]:
        """The line for a failed attempt and the seconds to wait before the next."""
        delay = self.backoff.next()
        self.down = True
        why = " ".join(why.split())[:_WHY_MAX]
        line = (
            f"{self.who}: cannot reach Redis at {self.where} (FANBOT_REDIS_URL): {why}; "
            f"retrying in {delay:.1f}s"
        )
        return line, delay

    def succeeded(self) -> str | None:
        """The recovery line after an outage, else None."""
        self.backoff.reset()
        was_down, self.down = self.down, False
        return f"{self.who}: Redis at {self.where} reachable again" if was_down else None


def ping(client: redis.Redis, key: str | None = None) -> str | None:
    """None if ``client`` answers PING (or, given ``key``, takes a short-lived write to
    it: a master being failed over answers PING but refuses writes), else why not.

    Raises:
        redis.AuthenticationError: The credentials were refused.
    """
    try:
        if key is None:
            client.ping()
        else:
            client.set(key, "1", px=PROBE_TTL_MS)
    except redis.AuthenticationError:
        raise
    except (redis.RedisError, OSError) as exc:
        return str(exc) or type(exc).__name__
    return None


def wait_until_reachable(url: str, *, who: str, stop: threading.Event | None = None) -> bool:
    """Block until Redis at ``url`` answers; False if ``stop`` was set first.

    Raises:
        ConfigError: Redis refused the credentials in the URL.
    """
    stop = stop or threading.Event()
    state = Reachability(who=who, where=address(url))
    client = connect(url, socket_timeout=PING_TIMEOUT, connect_timeout=PING_TIMEOUT, retries=0)
    try:
        while not stop.is_set():
            try:
                why = ping(client)
            except redis.AuthenticationError as exc:
                raise ConfigError(
                    f"Redis at {state.where} refused the credentials in FANBOT_REDIS_URL: {exc}"
                ) from None
            if why is None:
                if line := state.succeeded():
                    log.info("%s", line)
                return True
            line, delay = state.failed(why)
            log.warning("%s", line)
            stop.wait(delay)
        return False
    finally:
        client.close()


class RedisWatch:
    """A daemon thread that pings Redis and logs each outage step and the recovery.

    Args:
        url: ``FANBOT_REDIS_URL``.
        who: The process, first on each line.
        probe_key: Written (with a few seconds' TTL) instead of a PING, so that a master
            that answers but refuses writes counts as an outage too.
        interval: Seconds between two probes while Redis answers.
    """

    def __init__(
        self, *, url: str, who: str, probe_key: str | None = None, interval: float = WATCH_INTERVAL
    ) -> None:
        self.url = url
        self.probe_key = probe_key
        self.state = Reachability(who=who, where=address(url))
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-watch", daemon=True)
        self._up_since = float("-inf")  # steady from the start until a first outage

    @property
    def healthy(self) -> bool:
        """Whether the last ping was answered."""
        return not self.state.down

    def steady_for(self) -> float:
        """Seconds since Redis last came back (infinite if it never went away; 0 while down)."""
        return 0.0 if self.state.down else time.monotonic() - self._up_since

    def start(self) -> RedisWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(PING_TIMEOUT * 2)

    def _run(self) -> None:
        client = connect(
            self.url, socket_timeout=PING_TIMEOUT, connect_timeout=PING_TIMEOUT, retries=0
        )
        try:
            while not self._stop.wait(self._step(client)):
                pass
        finally:
            client.close()

    def _step(self, client: redis.Redis) -> float:
        try:
            why = ping(client, self.probe_key)
        except redis.AuthenticationError as exc:
            why = f"credentials refused: {exc}"
        if why is None:
            if line := self.state.succeeded():
                self._up_since = time.monotonic()
                log.info("%s", line)
            return self.interval
        line, delay = self.state.failed(why)
        log.warning("%s", line)
        return delay
