"""A protocol-level fake of the OpenAI chat-completions API, for the real ``openai`` SDK.

:class:`FakeOpenAI` is the production :class:`~bot.demo.chat_server.ChatServer` (a small
aiohttp server on a free loopback port) plus what tests assert on: every request, its
outcome, and concurrency, all recorded in the server's process, so forked workers that
reach it over HTTP are observed too. A script (see :mod:`bot.testing.scripted`) decides
each answer::

    async with FakeOpenAI(ScriptedModel(default=Text("hi"))) as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="x")

    fake = FakeOpenAI(script).start_in_thread()  # sync tests, non-async processes
    ...
    fake.stop()

Like a provider, it can enforce a rate limit: ``FakeOpenAI(script, max_requests=120,
window_seconds=60)`` answers a request that arrives when the last ``window_seconds`` already
had ``max_requests`` answered ones with HTTP 429 and a ``Retry-After`` (when the oldest of
them leaves the window), and counts it in :attr:`FakeOpenAI.over_limit`.

Like a model, it can have a context window: ``FakeOpenAI(script, context_window=8_000)``
answers a request whose messages and tools count more tokens than that
(:func:`bot.models.tokens.count_messages`, for the request's model) with OpenAI's own 400
``context_length_exceeded`` body, and counts it in :attr:`FakeOpenAI.too_long`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

from bot.demo import wire
from bot.demo.chat_server import ChatServer
from bot.demo.replies import ChatRequest, Fail, Reply, Script
from bot.models.tokens import count_messages


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


class FakeOpenAI(ChatServer):
    """The fake server. Use ``async with`` inside a loop, or ``with`` / start_in_thread."""

    def __init__(
        self,
        script: Script | None = None,
        *,
        models: Sequence[str] = ("fake-model",),
        max_requests: int | None = None,
        window_seconds: float = 60.0,
        context_window: int | None = None,
        **options: Any,
    ) -> None:
        """Configure (not start) the fake; ``max_requests`` per ``window_seconds`` (None: no
        limit) is its rate limit; ``context_window`` (tokens; None: any size) its window;
        ``options`` are :class:`ChatServer`'s (``strict_models``, ``stream_chunk_chars``,
        ``host``)."""
        super().__init__(script, models=models, **options)
        self.context_window = context_window
        self._too_long = 0
        self.max_requests = max_requests
        self.window_seconds = window_seconds
        self._admitted: collections.deque[float] = collections.deque()
        self._over_limit = 0
        self._records: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_concurrent = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- what tests read -------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Chat-completions requests so far, in arrival order (a copy of the list)."""
        return list(self._records)

    @property
    def in_flight(self) -> int:
        """Chat-completions requests being answered right now."""
        return self._in_flight

    @property
    def over_limit(self) -> int:
        """Requests answered 429 because they came over the rate limit."""
        return self._over_limit

    @property
    def too_long(self) -> int:
        """Requests answered 400 ``context_length_exceeded`` (over :attr:`context_window`)."""
        return self._too_long

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
        self._over_limit = 0
        self._too_long = 0

    # --- lifecycle ---------------------------------------------------------------------

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

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- recording ---------------------------------------------------------------------

    def _over_the_limit(self, now: float) -> Fail | None:
        """The 429 for a request arriving at ``now`` over the rate limit, else None (and the
        request is counted in the window)."""
        if self.max_requests is None:
            return None
        window = self._admitted
        while window and window[0] <= now - self.window_seconds:
            window.popleft()
        if len(window) < self.max_requests:
            window.append(now)
            return None
        self._over_limit += 1
        wait = math.ceil((window[0] + self.window_seconds - now) * 1000) / 1000
        return Fail(429, retry_after=max(0.001, wait), message="Rate limit reached (fake).")

    def prompt_tokens(self, record: RecordedRequest) -> int:
        """The tokens of a recorded request's messages and tools, as the window counts them."""
        body = record.body
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        return count_messages(messages or [], tools or [], model=str(body.get("model") or ""))

    def _over_the_window(self, record: RecordedRequest) -> web.Response | None:
        """OpenAI's 400 for a request over :attr:`context_window`, else None."""
        if self.context_window is None:
            return None
        used = self.prompt_tokens(record)
        if used <= self.context_window:
            return None
        self._too_long += 1
        message = (
            f"This model's maximum context length is {self.context_window} tokens. However, "
            f"your messages resulted in {used} tokens. Please reduce the length of the "
            "messages."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return web.json_response({"error": error}, status=400)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        chat = await self._read(request)
        if isinstance(chat, web.Response):
            return chat  # rejected bodies are not recorded
        record = RecordedRequest(
            index=len(self._records),
            body=dict(chat.body),
            chat=chat,
            headers={k.lower(): v for k, v in request.headers.items()},
            started_at=time.monotonic(),
        )
        self._records.append(record)
        refused = self._over_the_limit(record.started_at)
        if refused is not None:
            record.reply, record.status, record.outcome = refused, 429, "error"
            record.finished_at = time.monotonic()
            return wire.error_response(refused)
        too_long = self._over_the_window(record)
        if too_long is not None:
            record.status, record.outcome = 400, "error"
            record.finished_at = time.monotonic()
            return too_long
        self._in_flight += 1
        self._max_concurrent = max(self._max_concurrent, self._in_flight)

        def note(reply: Reply) -> None:
            record.reply = reply

        try:
            response = await self._answer(request, chat, record.index, note)
            record.status = response.status
            record.outcome = "ok" if response.status < 400 else "error"
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            record.outcome = "disconnected"
            raise
        finally:
            record.finished_at = time.monotonic()
            self._in_flight -= 1
