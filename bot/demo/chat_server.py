"""A chat-completions server on loopback whose answers a script decides.

``fanbot console`` runs it with the offline demo model when no model endpoint is
configured; ``bot.testing.FakeOpenAI`` extends it with request recording for tests. Point
any OpenAI-compatible client at :attr:`ChatServer.base_url`::

    async with ChatServer(demo_model()) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x")

Wire format follows OpenAI: ``chat.completion`` objects, SSE ``chat.completion.chunk``
lines ending in ``data: [DONE]``, tool-call deltas with ``index``, a final usage chunk with
empty ``choices`` when ``stream_options.include_usage`` is set, and ``{"error": {...}}``
bodies with ``retry-after`` headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Self

from aiohttp import web

from bot.demo import wire
from bot.demo.replies import ChatRequest, Fail, Hang, Reply, Script, Text, ToolCalls

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def bind_loopback(host: str = LOOPBACK, port: int = 0) -> socket.socket:
    """Return a listening TCP socket bound to ``host`` on ``port`` (0 = any free port).

    A server binds its socket *before* it reports its URL, so there is no window in which
    another process can take the port (the classic ``free_port()`` race).

    Args:
        host: Address to bind, loopback by default so the server is never reachable from
            outside.
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


class ChatServer:
    """The server. Use ``async with``, or :meth:`start` and :meth:`aclose`, inside a loop."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        models: Sequence[str] = ("demo-model",),
        strict_models: bool = False,
        stream_chunk_chars: int = 8,
        host: str = LOOPBACK,
    ) -> None:
        """Configure (not start) the server.

        Args:
            script: Decides each answer; ``Text("ok")`` for everything when ``None``.
            models: Names listed by ``GET /v1/models``.
            strict_models: Answer 404 ``model_not_found`` for models not in ``models``.
            stream_chunk_chars: Characters per streamed content or arguments delta.
            host: Address to bind.
        """
        self._script: Script = script or (lambda _request: Text("ok"))
        self.models = tuple(models)
        self.strict_models = strict_models
        self.stream_chunk_chars = max(1, stream_chunk_chars)
        self._host = host
        self._port = 0
        self._numbers = itertools.count()
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the SDK's ``base_url``."""
        if not self._port:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self._host}:{self._port}/v1"

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> Self:
        """Bind a free port and serve on the running loop."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/v1/models/{model}", self._get_model)
        # handler_cancellation: a client that gives up (timeout) ends its request here too,
        # so in-flight counts mirror what clients see.
        runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        sock = bind_loopback(self._host)
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._port = sock.getsockname()[1]
        self._runner = runner
        self._closing = asyncio.Event()
        return self

    async def aclose(self) -> None:
        """Stop serving; pending hangs and delays end at once."""
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # --- handlers ----------------------------------------------------------------------

    async def _list_models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [wire.model(m) for m in self.models]})

    async def _get_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.models:
            return wire.error_response(Fail(404, message=f"The model `{name}` does not exist."))
        return web.json_response(wire.model(name))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        chat = await self._read(request)
        if isinstance(chat, web.Response):
            return chat
        return await self._answer(request, chat, next(self._numbers))

    async def _read(self, request: web.Request) -> ChatRequest | web.Response:
        """The request body as a :class:`ChatRequest`, or the 400/404 a real server gives."""
        try:
            body = await request.json()
        except ValueError:
            return wire.error_response(Fail(400, message="The body is not valid JSON."))
        problem = wire.validate(body, self.models if self.strict_models else None)
        if problem is not None:
            return wire.error_response(problem)
        return ChatRequest.from_body(body)

    async def _answer(
        self,
        request: web.Request,
        chat: ChatRequest,
        index: int,
        on_reply: Callable[[Reply], None] | None = None,
    ) -> web.StreamResponse:
        """Answer ``chat`` as the script says; ``index`` numbers the completion's ids."""
        reply = await self._evaluate(chat)
        if on_reply is not None:
            on_reply(reply)
        if isinstance(reply, Hang):
            await self._sleep(reply.seconds)
            reply = reply.then or Fail(504, message="The scripted model hung on purpose.")
        await self._sleep(reply.delay)
        if isinstance(reply, Fail):
            return wire.error_response(reply)
        if not chat.stream:
            return web.json_response(wire.completion(reply, chat, index))
        return await self._stream(request, chat, index, reply)

    async def _evaluate(self, chat: ChatRequest) -> Reply:
        try:
            reply = self._script(chat)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            log.exception("chat server script failed")
            return Fail(500, message=f"The scripted model raised {exc!r}")
        if not isinstance(reply, Text | ToolCalls | Fail | Hang):
            return Fail(500, message=f"The scripted model returned {reply!r}, not a reply")
        return reply

    async def _stream(
        self, request: web.Request, chat: ChatRequest, index: int, reply: Text | ToolCalls
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunks = wire.stream_chunks(reply, chat, index, self.stream_chunk_chars)
        for i, chunk in enumerate(chunks):
            if i and reply.chunk_delay:
                await self._sleep(reply.chunk_delay)
            await response.write(wire.sse(chunk))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the server is closing so shutdown never waits."""
        if seconds <= 0 or self._closing is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)
