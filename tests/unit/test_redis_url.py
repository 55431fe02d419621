"""FANBOT_REDIS_URL forms: parsed, checked, shown and redacted without a socket."""

from __future__ import annotations

import pytest

from bot.config_check import redis_url_problem
from bot.redis.connect import node_options
from bot.redis.url import address, parse_sentinel, public_url, secrets_in
from bot.redis.watch import Reachability
from bot.supervise.backoff import Backoff

GOOD = [
    "redis://localhost:6379/0",
    "redis://fanbot:s3cret@redis.internal:6379/2",
    "rediss://fanbot:s3cret@redis.internal:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required",
    "rediss://h:6380/0?ssl_cert_reqs=none",
    "unix:///run/redis.sock?db=1",
    "redis+sentinel://s1:26379,s2:26379,s3/mymaster",
    "redis+sentinel://fanbot:pw@s1:26379,s2:26379/mymaster/3?sentinel_password=spw",
    "rediss+sentinel://s1:26379/mymaster?ssl_ca_certs=/ca.pem",
]


@pytest.mark.parametrize("url", GOOD)
def test_good_urls_have_no_problem(url: str) -> None:
    assert redis_url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:6379", "has scheme 'http'; use redis://host:6379/0"),
        (
            "redis://h:6379/0?ssl_ca_certs=/ca.pem",
            "sets ssl_ca_certs but is not TLS; write rediss://",
        ),
        (
            "rediss://h/0?ssl_cert_reqs=maybe",
            "ssl_cert_reqs must be one of none, optional, required",
        ),
        ("rediss://h/0?ssl_ca_cert=/ca.pem", "unknown option 'ssl_ca_cert'"),
        ("redis://h:99999/0", "Port out of range"),
        ("redis+sentinel://s1:26379", "needs the service name"),
        ("redis+sentinel://s1:26379/m/x", "db 'x' is not a number"),
        ("redis+sentinel://s1:abc/m", "Sentinel 's1:abc' has a bad port"),
        ("redis+sentinel:///m", "names no Sentinel host"),
        ("redis://h/0?sentinel_password=x", "unknown option 'sentinel_password'"),
        ("redis://h/x", "db 'x' is not a number"),
        ("redis://h/0?socket_timeout=soon", "socket_timeout must be a number"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, says: str) -> None:
    problem = redis_url_problem(url)
    assert problem is not None and says in problem, problem


def test_a_sentinel_url_taken_apart() -> None:
    target = parse_sentinel(
        "redis+sentinel://fan%40bot:p%2Fw@s1:26379,[::1]:26380,s3/mymaster/3"
        "?sentinel_password=spw&socket_keepalive=true"
    )
    assert target.sentinels == (("s1", 26379), ("::1", 26380), ("s3", 26379))
    assert target.service == "mymaster"
    assert target.sentinel == {"password": "spw"}
    assert node_options(target) == {
        "db": 3,
        "username": "fan@bot",
        "password": "p/w",
        "socket_keepalive": True,
    }


def test_tls_sentinel_speaks_tls_to_both() -> None:
    target = parse_sentinel("rediss+sentinel://s1/m?ssl_ca_certs=/ca.pem")
    assert target.tls
    assert node_options(target) == {"db": 0, "ssl_ca_certs": "/ca.pem"}
    assert target.sentinel == {"ssl_ca_certs": "/ca.pem"}


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://fanbot:s3cret@h:6379/0", "redis://fanbot:***@h:6379/0"),
        ("redis://:s3cret@h:6379/0", "redis://***@h:6379/0"),
        (
            "redis+sentinel://u:pw@s1:26379,s2/m?sentinel_password=spw&db=1",
            "redis+sentinel://u:***@s1:26379,s2/m?sentinel_password=***&db=1",
        ),
        ("rediss://h/0?ssl_password=kp", "rediss://h/0?ssl_password=***"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_public_url_hides_every_password(url: str, shown: str) -> None:
    assert public_url(url) == shown


def test_secrets_in_a_url_for_log_redaction() -> None:
    url = "redis+sentinel://u:p%40ss@s1/m?sentinel_password=spw"
    assert secrets_in(url) == ["p@ss", "spw"]


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("redis://u:pw@10.0.0.5:6390/0", "10.0.0.5:6390"),
        ("rediss://u:pw@redis.internal/0", "redis.internal:6379"),
        ("unix:///run/redis.sock", "/run/redis.sock"),
        (
            "redis+sentinel://u:pw@s1,s2:26380/mymaster",
            "master 'mymaster' via Sentinel s1:26379,s2:26380",
        ),
    ],
)
def test_address_names_the_server_without_a_password(url: str, where: str) -> None:
    assert address(url) == where


def test_reachability_says_each_step_then_recovery_once() -> None:
    state = Reachability(who="gateway", where="h:1", backoff=Backoff(base=1, cap=4, jitter=0))
    assert state.succeeded() is None  # up from the start: nothing to say
    lines = [state.failed("Connection refused") for _ in range(4)]
    assert [delay for _, delay in lines] == [1, 2, 4, 4]
    assert lines[0][0] == (
        "gateway: cannot reach Redis at h:1 (FANBOT_REDIS_URL): Connection refused; retrying in 1.0s"
    )
    assert state.succeeded() == "gateway: Redis at h:1 reachable again"
    assert state.succeeded() is None
    assert state.failed("x")[1] == 1  # the back-off starts over
