"""Loopback sockets for the protocol-level fakes.

A fake binds its listening socket *before* it reports its URL, so there is no window in
which another process can take the port (the classic ``free_port()`` race); that binding
is :func:`bot.demo.chat_server.bind_loopback`, shared with the console's demo model server.
``free_port`` exists for the few tools that insist on a port number (e.g. a subprocess's
flag).
"""

from __future__ import annotations

import socket

from bot.demo.chat_server import LOOPBACK, bind_loopback

__all__ = ["LOOPBACK", "bind_loopback", "free_port"]


def free_port(host: str = LOOPBACK) -> int:
    """Return a port that was free a moment ago (racy; prefer :func:`bind_loopback`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
