"""A protocol-level fake of the OpenAI chat-completions API, for the real ``openai`` SDK.

The fake is a small aiohttp server on a free loopback port. Point any OpenAI-compatible
client at :attr:`FakeOpenAI.base_url`; a script (see :mod:`bot.testing.scripted`) decides
each answer. Everything the tests assert on (requests, concurrency) is recorded in the
server's process, so forked workers that reach it over HTTP are observed too::

    async with FakeOpenAI(ScriptedModel(default=Text("hi"))) as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="x")

    fake = FakeOpenAI(script).start_in_thread()  # sync tests, non-async processes
    ...
    fake.stop()

Wire format follows OpenAI: ``chat.completion`` objects, SSE ``chat.completion.chunk``
lines ending in ``data: [DONE]``, tool-call deltas with ``index``, a final usage chunk with
empty ``choices`` when ``stream_options.include_usage`` is set, and ``{"error": {...}}``
bodies with ``retry-after`` headers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from bot.testing import openai_wire as wire
from bot.testing.netutil import LOOPBACK, bind_loopback
from bot.testing.scripted import ChatRequest, Fail, Hang, Reply, Script, Text, ToolCalls

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RecordedRequest:
    """One chat-completions request as the fake saw it (mutated until it finishes).

    Attributes:
        index: Arrival number, from 0.
        body: The parsed JSON body.
        chat: The same body as a :class:`ChatRequest`.
        headers: Request headers (lower-cased names).
        started_at: ``time.monotonic()`` at arrival.
        finished_at: ``time.monotonic()`` when the answer was complete or the client left.
        reply: What the script answered.
        status: HTTP status sent.
        outcome: ``in_flight``, ``ok``, ``error`` (HTTP error sent) or ``disconnected``.
    """

    index: int
    body: dict[str, Any]
    chat: ChatRequest
    headers: dict[str, str]
    started_at: float
    finished_at: float | None = None
    reply: Reply | None = None
    status: int | None = None
    outcome: str = "in_flight"

    @property
    def retry_count(self) -> int:
        """The SDK's ``x-stainless-retry-count`` header (0 for a first attempt)."""
        return int(self.headers.get("x-stainless-retry-count", "0") or 0)


class FakeOpenAI:
    """The fake server. Use ``async with`` inside a loop, or ``with`` / start_in_thread."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        models: Sequence[str] = ("fake-model",),
        strict_models: bool = False,
        stream_chunk_chars: int = 8,
        host: str = LOOPBACK,
    ) -> None:
        """Configure (not start) the fake.

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
        self._records: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_concurrent = 0
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- what tests read -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the SDK's ``base_url``."""
        if not self._port:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://{self._host}:{self._port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Chat-completions requests so far, in arrival order (a copy of the list)."""
        return list(self._records)

    @property
    def in_flight(self) -> int:
        """Chat-completions requests being answered right now."""
        return self._in_flight

    @property
    def max_concurrent(self) -> int:
        """High-water mark of :attr:`in_flight`."""
        return self._max_concurrent

    def max_overlap(self, where: Callable[[RecordedRequest], bool] | None = None) -> int:
        """Most requests matching ``where`` that were in flight at the same moment.

        Example: ``fake.max_overlap(lambda r: not r.chat.has_tool("sessions_spawn"))`` is
        the peak number of concurrent subagent model calls.
        """
        events: list[tuple[float, int]] = []
        for record in self._records:
            if where is None or where(record):
                end = record.finished_at if record.finished_at is not None else float("inf")
                events += [(record.started_at, 1), (end, -1)]
        # At equal times, ends sort before starts: back-to-back calls do not overlap.
        events.sort()
        peak = current = 0
        for _, step in events:
            current += step
            peak = max(peak, current)
        return peak

    def reset(self) -> None:
        """Forget recorded requests and the high-water mark."""
        self._records.clear()
        self._max_concurrent = self._in_flight

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

    def start_in_thread(self) -> Self:
        """Serve from a private event loop in a daemon thread; returns once listening."""
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                ready.set_exception(exc)
                loop.close()
                return
            ready.set_result(None)
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="fake-openai", daemon=True)
        self._thread.start()
        ready.result(timeout=30)
        return self

    def stop(self) -> None:
        """Stop a fake started with :meth:`start_in_thread` (blocking)."""
        if self._loop is None or self._thread is None:
            raise RuntimeError("stop() is for start_in_thread(); use `await fake.aclose()`")
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)

    def __enter__(self) -> Self:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- handlers ----------------------------------------------------------------------

    async def _list_models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [wire.model(m) for m in self.models]})

    async def _get_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.models:
            return wire.error_response(Fail(404, message=f"The model `{name}` does not exist."))
        return web.json_response(wire.model(name))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return wire.error_response(Fail(400, message="The body is not valid JSON."))
        problem = wire.validate(body, self.models if self.strict_models else None)
        if problem is not None:
            return wire.error_response(problem)
        record = RecordedRequest(
            index=len(self._records),
            body=body,
            chat=ChatRequest.from_body(body),
            headers={k.lower(): v for k, v in request.headers.items()},
            started_at=time.monotonic(),
        )
        self._records.append(record)
        self._in_flight += 1
        self._max_concurrent = max(self._max_concurrent, self._in_flight)
        try:
            response = await self._answer(request, record)
            record.status = response.status
            record.outcome = "ok" if response.status < 400 else "error"
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            record.outcome = "disconnected"
            raise
        finally:
            record.finished_at = time.monotonic()
            self._in_flight -= 1

    async def _answer(self, request: web.Request, record: RecordedRequest) -> web.StreamResponse:
        reply = await self._evaluate(record.chat)
        record.reply = reply
        if isinstance(reply, Hang):
            await self._sleep(reply.seconds)
            reply = reply.then or Fail(504, message="The fake model hung on purpose.")
        await self._sleep(reply.delay)
        if isinstance(reply, Fail):
            return wire.error_response(reply)
        if not record.chat.stream:
            return web.json_response(wire.completion(reply, record.chat, record.index))
        return await self._stream(request, record, reply)

    async def _evaluate(self, chat: ChatRequest) -> Reply:
        try:
            reply = self._script(chat)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:
            log.exception("fake model script failed")
            return Fail(500, message=f"The fake model's script raised {exc!r}")
        if not isinstance(reply, Text | ToolCalls | Fail | Hang):
            return Fail(500, message=f"The fake model's script returned {reply!r}, not a reply")
        return reply

    async def _stream(
        self, request: web.Request, record: RecordedRequest, reply: Text | ToolCalls
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunks = wire.stream_chunks(reply, record.chat, record.index, self.stream_chunk_chars)
        for i, chunk in enumerate(chunks):
            if i and reply.chunk_delay:
                await self._sleep(reply.chunk_delay)
            await response.write(wire.sse(chunk))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the fake is closing so shutdown never waits."""
        if seconds <= 0 or self._closing is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)
