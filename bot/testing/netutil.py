"""Loopback sockets for the protocol-level fakes, and their ``async with`` (:class:`FakeServer`).

A fake binds its listening socket *before* it reports its URL, so there is no window in
which another process can take the port (the classic ``free_port()`` race); that binding
is :func:`bot.demo.chat_server.bind_loopback`, shared with the console's demo model server.
``free_port`` exists for the few tools that insist on a port number (e.g. a subprocess's
flag).
"""

from __future__ import annotations

import socket
from typing import Self

from aiohttp import web

from bot.demo.chat_server import LOOPBACK, bind_loopback

__all__ = ["LOOPBACK", "FakeServer", "bind_loopback", "free_port"]


class FakeServer:
    """A fake that serves between ``await start()`` and ``await stop()``; ``async with``
    starts it, gives it, and stops it.

    Attributes:
        _runner: The aiohttp runner serving its port (None: not listening).
        _port: The port it listens on (0 before the first start; kept over a pause).
    """

    _runner: web.AppRunner | None = None
    _port: int = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, where it listens."""
        return f"http://{LOOPBACK}:{self._port}"

    async def start(self) -> object:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    async def _close_port(self) -> None:
        """Stop listening (a fake that pauses listens on the same port again later)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def free_port(host: str = LOOPBACK) -> int:
    """Return a port that was free a moment ago (racy; prefer :func:`bind_loopback`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
