"""The async half of the MCP tools: a private event loop thread, and one connection per server.

Tools run synchronously in an RQ work horse, while the ``mcp`` SDK is async. So each
process that uses MCP runs one :class:`LoopThread` of its own (started on first use, never
shared across a fork) and talks to every server through a :class:`Connection` on it.

A connection is one task that enters the SDK's transport and session context managers and
holds them until it is cancelled: anyio requires a cancel scope to be left by the task that
entered it. Calls are other tasks on the same loop. The server's message stream is relayed
through the connection, so a server that exited between two calls is noticed before the
next call is sent (and that call reconnects instead of failing).

A stdio server is started through a tiny wrapper that asks Linux to SIGKILL it when the
process that started it dies (``PR_SET_PDEATHSIG``): an RQ work horse ends with
``os._exit`` (no ``atexit``) or a SIGKILL, and a server stuck in a tool would otherwise
outlive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from bot.config import McpServer
from bot.supervise import abort

log = logging.getLogger(__name__)

T = TypeVar("T")
Streams = tuple[Any, Any]

HTTP_READ_TIMEOUT = 300.0  # an idle server-sent-events stream; calls are bounded separately

# argv: [-c, parent pid, program, args...]; PR_SET_PDEATHSIG is 1; survives the exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class Unreachable(Exception):
    """A server that could not be started or connected to (the message says why)."""


class LoopThread:
    """An asyncio event loop on a daemon thread, and a blocking way to run coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float) -> T:
        """Run ``coro`` on the loop and wait for it at most ``timeout`` seconds.

        Raises:
            TimeoutError: ``coro`` did not finish in time (it is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            with abort.closing(future.cancel):  # a stopped run's call is cancelled at once
                return future.result(timeout)
        except BaseException:  # our timeout, or RQ's job timeout raised in this thread
            future.cancel()
            raise

    def stop(self, *, timeout: float) -> None:
        """Stop the loop and close it once the thread has ended."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


class Connection:
    """One live session with one MCP server; every method runs on the bridge's loop."""

    def __init__(self, *, name: str, server: McpServer) -> None:
        self.name = name
        self.server = server
        self.session: ClientSession | None = None
        self._scope = anyio.CancelScope()
        self._ended = asyncio.Event()
        self._eof = False
        self._task: asyncio.Task[None] | None = None  # referenced, so it is not collected

    @property
    def usable(self) -> bool:
        """Whether calls can be sent: initialized, not closed, the server still there."""
        return self.session is not None and not self._eof and not self._ended.is_set()

    async def open(self) -> ClientSession:
        """Start the server (or connect to it) and initialize the session; unbounded, so
        the caller bounds it. On any failure or cancellation the connection is closed.

        Raises:
            Unreachable: The server could not be started or did not initialize.
        """
        if self.server.command and shutil.which(self.server.command[0]) is None:
            raise Unreachable(f"command {self.server.command[0]!r} not found")
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(_retrieved)  # nobody awaits it once open() is cancelled
        self._task = asyncio.get_running_loop().create_task(self._hold(ready))
        try:
            return await asyncio.shield(ready)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the connection in the background (a stdio server is shut down as the SDK
        does: stdin closed, then SIGTERM, then SIGKILL, each wait bounded)."""
        self._scope.cancel()

    async def ended(self) -> None:
        """Wait until the connection has fully shut down."""
        await self._ended.wait()

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            with self._scope:
                await self._serve(ready)
        except Exception as exc:  # the connection's end is reported to whoever waits
            reason = describe(exc)
            if not ready.done():
                ready.set_exception(Unreachable(reason))
            else:
                log.info("MCP server %s: connection ended: %s", self.name, reason)
        finally:
            self.session = None
            self._ended.set()
            if not ready.done():
                ready.set_exception(Unreachable("the connection was closed while starting"))

    async def _serve(self, ready: asyncio.Future[ClientSession]) -> None:
        async with _transport(self.server) as (read, write), anyio.create_task_group() as tg:
            relayed, inbox = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            tg.start_soon(self._relay, read, relayed)
            async with ClientSession(inbox, write) as session:
                await session.initialize()
                self.session = session
                ready.set_result(session)
                await anyio.sleep_forever()

    async def _relay(self, source: Any, sink: Any) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with sink:
                async for message in source:
                    await sink.send(message)
        self._eof = True


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@contextlib.asynccontextmanager
async def _transport(server: McpServer) -> AsyncIterator[Streams]:
    if server.url is not None:
        headers = {k: v.get_secret_value() for k, v in server.headers.items()}
        timeout = httpx2.Timeout(server.timeout_seconds, read=HTTP_READ_TIMEOUT)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            streamable_http_client(server.url, http_client=http) as (read, write),
        ):
            yield read, write
    else:
        async with stdio_client(stdio_parameters(server)) as (read, write):
            yield read, write


def stdio_parameters(server: McpServer) -> StdioServerParameters:
    """How the SDK starts ``server``: on Linux through the die-with-parent wrapper."""
    command = list(server.command)
    if sys.platform == "linux":
        wrapper = [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid())]
        command = wrapper + command
    env = {k: v.get_secret_value() for k, v in server.env.items()}
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def describe(exc: BaseException) -> str:
    """A one-line reason for ``exc``, looking inside exception groups (anyio's task groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
