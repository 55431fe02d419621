"""Loopback sockets for the protocol-level fakes.

A fake binds its listening socket *before* it reports its URL, so there is no window in
which another process can take the port (the classic ``free_port()`` race). ``free_port``
exists for the few tools that insist on a port number (e.g. a subprocess's flag).
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def bind_loopback(host: str = LOOPBACK, port: int = 0) -> socket.socket:
    """Return a listening TCP socket bound to ``host`` on ``port`` (0 = any free port).

    Args:
        host: Address to bind, loopback by default so fakes are never reachable from outside.
        port: Port to bind; 0 lets the kernel choose.

    Returns:
        A non-blocking, listening socket; the caller owns it (aiohttp's ``SockSite`` takes it).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def free_port(host: str = LOOPBACK) -> int:
    """Return a port that was free a moment ago (racy; prefer :func:`bind_loopback`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
