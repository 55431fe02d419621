"""Helpers for the web tool tests: a loopback aiohttp server, a tool context, a test CA."""

from __future__ import annotations

import contextlib
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import redis
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bot.agent.context import ToolContext
from bot.config import Settings
from bot.deps import Deps
from bot.testing.netutil import bind_loopback
from bot.types import ThreadRef


@contextlib.asynccontextmanager
async def serve(
    app: web.Application, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    """Serve ``app`` on ``host``; yields the port."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    sock = bind_loopback(host, port)
    await web.SockSite(runner, sock, ssl_context=tls).start()
    try:
        yield sock.getsockname()[1]
    finally:
        await runner.cleanup()


def tool_context(s: Settings) -> ToolContext:
    # A lazy client: the web tools never touch Redis, and no connection is made.
    deps = Deps.build(s, client=redis.Redis(host="127.0.0.1", port=1))
    thread = ThreadRef(platform="console", account="local", chat="c", thread=None)
    return ToolContext(
        deps=deps,
        session_key="agent:main:console:c",
        thread=thread,
        requester="console:me",
        agent_id="main",
    )


def make_authority(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext, list[str | None]]:
    """A CA, a server context with a certificate for pinned.test (recording the SNI it is
    asked for), and a client context trusting only that CA."""
    now = dt.datetime.now(dt.UTC)

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = cert("fanbot test CA", ca_key, "fanbot test CA", ca_key, ca=True)
    leaf = cert("pinned.test", leaf_key, "fanbot test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "key.pem").write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "key.pem")
    sni: list[str | None] = []
    server.sni_callback = lambda sock, name, context: sni.append(name)
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client, sni
