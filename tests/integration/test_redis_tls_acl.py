"""``rediss://`` with a CA and an ACL user, against a real TLS ``redis-server``.

The server listens on TLS only, its ``default`` user is off, and the ``fanbot`` user has
a password: each client fanbot builds (sync, async, doctor, start-up wait) must use both.
Last, ``rediss+sentinel://``: a TLS master, replica and Sentinel.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from bot.cli.doctor import check_redis
from bot.config import Settings
from bot.errors import ConfigError
from bot.redis.connect import connect, connect_async
from bot.redis.watch import wait_until_reachable
from bot.testing.netutil import free_port
from tests.redis_support import (
    LOOPBACK,
    Certs,
    Server,
    make_certs,
    sentinel_config,
    tls_acl_server,
    tls_url,
)

PASSWORD = "pw-Zq8/wX@y"  # has characters a URL must escape


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Server]:
    server = tls_acl_server(tmp_path_factory.mktemp("tls-redis"), certs, password=PASSWORD)
    yield server
    server.stop()


def url_for(server: Server, certs: Certs, *, password: str = PASSWORD) -> str:
    return tls_url(server, certs, user="fanbot", password=password)


def test_sync_client_over_tls_as_the_acl_user(tls_server: Server, certs: Certs) -> None:
    client = connect(url_for(tls_server, certs))
    try:
        client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.acl_whoami() == "fanbot"
    finally:
        client.close()


async def test_async_client_over_tls_as_the_acl_user(tls_server: Server, certs: Certs) -> None:
    client = connect_async(url_for(tls_server, certs), decode_responses=True)
    try:
        await client.set("ak", "v")
        assert await client.get("ak") == "v"
        assert await client.acl_whoami() == "fanbot"
    finally:
        await client.aclose()


def test_a_certificate_from_another_ca_is_refused(
    tls_server: Server, tmp_path: Path, certs: Certs
) -> None:
    other = make_certs(tmp_path / "other")
    client = connect(url_for(tls_server, other), retries=0)
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        client.ping()
    client.close()


def test_wrong_password_stops_start_up_without_showing_it(tls_server: Server, certs: Certs) -> None:
    with pytest.raises(ConfigError) as caught:
        wait_until_reachable(url_for(tls_server, certs, password="wrong-hunter2"), who="test")
    text = str(caught.value)
    assert f"Redis at {LOOPBACK}:{tls_server.port} refused the credentials" in text
    assert "hunter2" not in text


def test_doctor_reaches_it_and_never_prints_the_password(tls_server: Server, certs: Certs) -> None:
    settings = Settings(redis_url=url_for(tls_server, certs))
    checks = check_redis(settings)
    assert checks[0].ok, checks[0]
    assert "fanbot:***@" in checks[0].detail
    assert all(
        PASSWORD not in c.detail and quote(PASSWORD, safe="") not in c.detail for c in checks
    )


def tls_node(root: Path, certs: Certs, args: list[str], config: str | None = None) -> Server:
    port = free_port()
    tls = [
        "--tls-port", str(port),
        "--tls-cert-file", str(certs.cert),
        "--tls-key-file", str(certs.key),
        "--tls-ca-cert-file", str(certs.ca),
        "--tls-auth-clients", "no",
        "--tls-replication", "yes",
    ]  # fmt: skip
    server = Server(data_dir=root, port=0, args=[*tls, *args], config=config)
    ready = redis.Redis(
        host=LOOPBACK, port=port, ssl=True, ssl_ca_certs=str(certs.ca), socket_timeout=1
    )
    server.start(ready=ready)
    server.port = port
    return server


async def test_sentinel_over_tls(tmp_path: Path, certs: Certs) -> None:
    master = tls_node(tmp_path / "master", certs, [])
    nodes = [
        master,
        tls_node(tmp_path / "replica", certs, ["--replicaof", LOOPBACK, str(master.port)]),
    ]
    conf = sentinel_config(service="svc", master_port=master.port, quorum=1)
    nodes.append(tls_node(tmp_path / "sentinel", certs, ["--sentinel"], config=conf))
    url = f"rediss+sentinel://{LOOPBACK}:{nodes[-1].port}/svc/0?ssl_ca_certs={certs.ca}"
    try:
        client = connect(url)
        client.set("k", "v")
        assert client.info("replication")["role"] == "master"
        client.close()
        aclient = connect_async(url, decode_responses=True)
        assert await aclient.get("k") == "v"
        await aclient.aclose()
    finally:
        for node in reversed(nodes):
            node.stop()
