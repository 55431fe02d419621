"""The :class:`~bot.models.completion.ChatModel` on the ``openai`` SDK: one streaming
chat-completions call, folded into a plain :class:`~bot.models.completion.Completion`.

The SDK's own bounded retries (``max_retries``, honouring ``Retry-After``) handle 429/5xx
when the client has no fleet-wide limits. With them (:class:`~bot.store.model_limits.ModelLimits`,
docs/architecture.md "Fleet-wide model limits") every HTTP attempt, retries included, first
takes room in the endpoint's shared window, waiting (abortably, never past the run's
deadline) while there is none; the SDK retries nothing itself, and a 429 pauses every
caller of the endpoint for its ``Retry-After``.
What comes back is data: the assistant's text, its tool calls and the token usage.

Memory is bounded by ``max_reply_chars``: text (and each tool call's arguments) past it is
still read, so the usage chunk at the end of the stream counts, but not kept; a cut text
ends with a note saying how much was dropped.
"""

from __future__ import annotations

import contextlib
import email.utils
import random
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import openai

from bot.config import OpenAISettings
from bot.models.completion import ChatModel, Completion, CompletionRequest, ToolCallRequest
from bot.models.dialect import Dialect, Learned, dialect_for, refused_parameter
from bot.models.errors import ModelRateLimited
from bot.models.stream import read_stream
from bot.observe.scope import model_call as observe_model_call
from bot.runs.budget import estimate
from bot.store.model_limits import ModelLimits, endpoint_id
from bot.supervise import abort

OFFLINE_BASE_URL_HINT = "no model endpoint configured"
WAITING_FOR_RATE_LIMIT = "waiting for the model's rate limit"
"""What a call waiting for room in the endpoint's window tells ``on_wait`` (and so the card)."""
MAX_NAP = 5.0
"""A waiting call asks again (and tells ``on_wait`` again, a sign of life) at least this often."""
MAX_PAUSE = 600.0
"""A ``Retry-After`` longer than this is taken as this."""
MAX_WAIT = 900.0
"""A call without a deadline (a main-agent turn) waits at most this long for room."""
RETRY_HEADER = "x-stainless-retry-count"
"""The SDK's header saying which retry an attempt is; our own retries send it as it would."""
RETRIED_STATUSES = frozenset({408, 409, 429})
"""Statuses retried (with every 5xx), as the SDK retries them."""


class _ApiKeyHeaderClient(openai.OpenAI):
    """The SDK's client sending its key in an ``api-key`` header instead of a bearer token
    (Azure; docs/models.md "Server kinds and their dialects"), on every request it makes."""

    def _auth_headers(self, security: Any) -> dict[str, str]:
        return {"api-key": self.api_key}

    def _validate_headers(self, headers: Any, custom_headers: Any) -> None:
        return None


def _cutter(stream: Any) -> Callable[[], None]:
    """How to cut ``stream``'s response from another thread: shut its socket down, which
    wakes the reading thread at once (closing the file descriptor would not)."""
    response = getattr(stream, "response", None)

    def cut() -> None:
        if response is None:
            return
        network = response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is None:
            response.close()
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    return cut


def retries_within(budget: float | None, per_attempt: float, configured: int) -> int:
    """SDK retries allowed so that every attempt (each up to ``per_attempt`` s) fits ``budget``."""
    if budget is None:
        return configured
    fits = int(budget // max(per_attempt, 0.001)) - 1
    return max(0, min(configured, fits))


__all__ = [
    "ChatModel",
    "Completion",
    "CompletionRequest",
    "ModelRateLimited",
    "OpenAIChatModel",
    "ToolCallRequest",
    "fold_stream",
    "retries_within",
]


class OpenAIChatModel:
    """A chat-completions client bound to one endpoint (the production :class:`ChatModel`).

    Args:
        settings: Endpoint, key, timeouts, retry budget and per-minute limits.
        limits: The fleet-wide limiter (None: calls are not counted, and the SDK retries).
    """

    def __init__(self, *, settings: OpenAISettings, limits: ModelLimits | None = None) -> None:
        self.settings = settings
        self.limits = limits
        self.dialect: Dialect = dialect_for(settings.kind, settings.base_url)
        self.learned = Learned()  # what this endpoint refused (docs/models.md)
        key = settings.api_key.get_secret_value() if settings.api_key else "not-needed"
        client_class = _ApiKeyHeaderClient if self.dialect.key_header else openai.OpenAI
        self.client = client_class(
            base_url=settings.base_url,
            api_key=key,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout,
        )
        self._models: frozenset[str] | None = None

    @property
    def base_url(self) -> str:
        return str(self.client.base_url)

    def close(self) -> None:
        self.client.close()

    def complete(self, request: CompletionRequest) -> Completion:
        """Run one streamed completion; ``on_text`` gets the running count of text chars,
        ``on_chunk`` is called for every chunk (text, tool call, usage: a sign of life).

        ``timeout`` (the run's time left) caps each HTTP attempt below the configured
        request timeout, never under a second; ``budget`` (seconds left before the run's
        deadline) bounds the SDK's retries to the attempts that still fit in it.
        """
        model, timeout = request.model, request.timeout
        attempt = self.settings.request_timeout
        if timeout is not None:
            attempt = max(1.0, min(attempt, timeout))
        # The messages and tools go in ``extra_body``, which the SDK sends as they are: as
        # typed parameters it first walks them against its TypedDicts (~1.2 ms a call, ~2 ms
        # on a fresh horse's first; measured). Our dicts are already wire JSON; the request
        # body is the same (tested against the fake model).
        body: dict[str, Any] = {"messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
        base: dict[str, Any] = {
            "model": model,
            "messages": [],
            "stream": True,
            "timeout": attempt,
            "extra_body": body,
        }
        retries = retries_within(request.budget, attempt, self.settings.max_retries)
        with observe_model_call(model) as call:  # a span, tokens and cost for the metrics
            abort.check()
            try:
                stream, grant = self._create(base, request, retries)
            except openai.APIStatusError as exc:
                # A 400 naming a parameter the server refuses: learn it, ask once more.
                refused = refused_parameter(
                    exc.status_code, exc.body, exc.message, set(self._shape(request))
                )
                if refused is None or not self.learned.learn(refused):
                    raise
                stream, grant = self._create(base, request, retries)
            try:
                with abort.closing(_cutter(stream)):  # a stop cuts the response mid-stream
                    completion = fold_stream(
                        call.watch(stream),
                        request.on_text,
                        limit=self.settings.max_reply_chars,
                        on_chunk=request.on_chunk,
                        messages=request.messages,
                        tools=request.tools,
                        model=model,
                    )
            except Exception as exc:
                if abort.aborted():
                    raise abort.Aborted("stopped during the model call") from exc
                raise
            call.usage = completion.usage
            if self.limits is not None:
                self.limits.settle(self._endpoint, grant, tokens=completion.usage.total)
        return completion

    def _shape(self, request: CompletionRequest) -> dict[str, Any]:
        """The request's optional parameters, as this endpoint's dialect sends them."""
        return self.dialect.shape(
            model=request.model,
            max_output_tokens=self.settings.max_output_tokens,
            thinking=request.thinking,
            has_tools=bool(request.tools),
            learned=self.learned,
        )

    def _create(
        self, base: dict[str, Any], request: CompletionRequest, retries: int
    ) -> tuple[Any, str]:
        """Send the request (shaped now: what was learned counts); the stream and its grant."""
        # All in the body as they are: some are not the SDK's typed parameters (OpenRouter's
        # ``reasoning``), and the typed ones would be sent the same.
        kwargs = base | {"extra_body": base["extra_body"] | self._shape(request)}
        if self.limits is not None:
            return self._limited_create(self.limits, kwargs, request, retries)
        client = self.client
        if retries != self.settings.max_retries:
            client = client.with_options(max_retries=retries)
        return client.chat.completions.create(**kwargs), ""

    @property
    def _endpoint(self) -> str:
        return endpoint_id(self.base_url)

    def _limited_create(
        self, limits: ModelLimits, kwargs: dict[str, Any], request: CompletionRequest, retries: int
    ) -> tuple[Any, str]:
        """Send the request, each attempt after room in the shared window; ``retries`` more
        attempts after one that failed as the SDK would retry it. Returns the stream and its
        grant (settled by the caller with the real use)."""
        client = self.client.with_options(max_retries=0)  # every attempt is counted here
        guess = estimate(request.messages, request.tools, self.settings.max_output_tokens).total
        deadline = time.monotonic() + (MAX_WAIT if request.budget is None else request.budget)
        for attempt in range(retries + 1):
            grant = self._wait_for_room(limits, guess, deadline, request.on_wait)
            try:
                headers = {**kwargs.get("extra_headers", {}), RETRY_HEADER: str(attempt)}
                return client.chat.completions.create(**kwargs | {"extra_headers": headers}), grant
            except openai.APIError as exc:
                limits.settle(self._endpoint, grant, tokens=0)
                delay = _retry_delay(exc, attempt)
                limited = isinstance(exc, openai.RateLimitError) and delay is not None
                if limited:  # every caller of the endpoint waits, not just this one
                    limits.pause(self._endpoint, delay or 0.0)
                if delay is None or attempt == retries:
                    raise
                if limited:
                    continue  # the next attempt waits for the pause (and the window)
                if time.monotonic() + delay > deadline:
                    raise
                _nap(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait_for_room(
        self,
        limits: ModelLimits,
        tokens: int,
        deadline: float,
        on_wait: Callable[[str], None] | None,
    ) -> str:
        """Wait (abortably, never past ``deadline``) until the window has room for a request
        of ``tokens``; returns its grant id. ``on_wait`` hears the wait and its end ("")."""
        waiting = False
        s = self.settings
        try:
            while True:
                abort.check()
                grant = limits.acquire(
                    self._endpoint,
                    max_requests=s.max_requests_per_minute,
                    max_tokens=s.max_tokens_per_minute,
                    tokens=tokens,
                    window_seconds=s.limit_window_seconds,
                )
                if grant.granted:
                    return grant.grant_id
                if time.monotonic() + grant.wait > deadline:
                    raise ModelRateLimited(
                        f"the model's rate limit ({grant.why}) leaves no room before the "
                        "run's deadline",
                        httpx2.Request("POST", self.base_url),
                        body=None,
                    )
                waiting = True
                if on_wait is not None:
                    on_wait(WAITING_FOR_RATE_LIMIT)
                # a little jitter: the callers woken by one freed slot do not all ask at once
                _nap(min(grant.wait, MAX_NAP) + random.uniform(0, 0.05))
        finally:
            if waiting and on_wait is not None:
                on_wait("")

    def known_models(self) -> frozenset[str] | None:
        """Model ids the endpoint lists (cached); None if it cannot say."""
        if self._models is None:
            try:
                page = self.client.models.list(timeout=min(5.0, self.settings.request_timeout))
                self._models = frozenset(m.id for m in page.data)
            except openai.OpenAIError:
                return None
        return self._models


def _nap(seconds: float) -> None:
    """Sleep ``seconds``; a stop of the current run ends the sleep at once (and the call)."""
    current = abort.current()
    if current is None:
        time.sleep(seconds)
    elif current.wait(seconds):
        raise abort.Aborted("stopped while waiting for the model's rate limit")


def _retry_delay(exc: openai.APIError, attempt: int) -> float | None:
    """How long to wait before retrying after ``exc`` (its ``Retry-After``, else the SDK's
    backoff), or None when the SDK would not retry it."""
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code not in RETRIED_STATUSES and exc.status_code < 500:
            return None
        if exc.code == "insufficient_quota":
            return None
        said = retry_after(exc.response.headers)
        if said is not None:
            return said
    elif not isinstance(exc, openai.APIConnectionError):
        return None
    return float(min(8.0, 0.5 * 2.0**attempt) * random.uniform(0.75, 1.0))


def retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds a response's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)
    asks to wait, at most :data:`MAX_PAUSE`; None without a usable one."""
    seconds: float | None = None
    with contextlib.suppress(ValueError, TypeError):
        raw_ms = headers.get("retry-after-ms")
        if raw_ms is not None:
            seconds = float(raw_ms) / 1000
    raw = headers.get("retry-after")
    if seconds is None and raw is not None:
        try:
            seconds = float(raw)
        except ValueError:
            with contextlib.suppress(ValueError, TypeError):
                seconds = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
    if seconds is None or seconds != seconds or seconds < 0:
        return None
    return float(min(seconds, MAX_PAUSE))


def fold_stream(
    stream: Any,
    on_text: Callable[[int], None] | None = None,
    *,
    limit: int,
    on_chunk: Callable[[], None] | None = None,
    messages: Sequence[dict[str, Any]] = (),
    tools: Sequence[dict[str, Any]] = (),
    model: str = "",
) -> Completion:
    """Fold chat-completion chunks into one :class:`Completion` (:func:`bot.models.stream.
    read_stream`: any server's shapes), keeping at most ``limit`` characters of text and of
    each call's arguments (``on_text`` gets the running count; ``on_chunk`` is called for
    every chunk); ``messages``/``tools``/``model`` count the usage a stream lacks."""
    read = read_stream(
        stream,
        on_text,
        limit=limit,
        on_chunk=on_chunk,
        messages=messages,
        tools=tools,
        model=model,
    )
    calls = tuple(
        ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments, cut_chars=c.cut_chars)
        for c in read.tool_calls
    )
    return Completion(
        content=read.content,
        tool_calls=calls,
        usage=read.usage,
        finish_reason=read.finish_reason,
        cut_chars=read.cut_chars,
        reasoning=read.reasoning,
    )
