"""The :class:`~bot.agent.completion.ChatModel` on the ``openai`` SDK: one streaming
chat-completions call, folded into a plain :class:`~bot.agent.completion.Completion`.

The SDK's own bounded retries (``max_retries``, honouring ``Retry-After``) handle 429/5xx.
What comes back is data: the assistant's text, its tool calls and the token usage.

Memory is bounded by ``max_reply_chars``: text (and each tool call's arguments) past it is
still read, so the usage chunk at the end of the stream counts, but not kept; a cut text
ends with a note saying how much was dropped.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.agent.completion import ChatModel, Completion, CompletionRequest, ToolCallRequest
from bot.config import OpenAISettings
from bot.observe.scope import model_call as observe_model_call
from bot.supervise import abort
from bot.text.clip import cut_note
from bot.types import Usage

OFFLINE_BASE_URL_HINT = "no model endpoint configured"
MAX_NAME_CHARS = 256  # a tool name; real ones are short, a runaway one is cut


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
    "OpenAIChatModel",
    "ToolCallRequest",
    "fold_stream",
    "retries_within",
]


class OpenAIChatModel:
    """A chat-completions client bound to one endpoint (the production :class:`ChatModel`).

    Args:
        settings: Endpoint, key, timeouts and retry budget.
    """

    def __init__(self, *, settings: OpenAISettings) -> None:
        self.settings = settings
        key = settings.api_key.get_secret_value() if settings.api_key else "not-needed"
        self.client = openai.OpenAI(
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
        model, timeout, thinking = request.model, request.timeout, request.thinking
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
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [],
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": attempt,
            "extra_body": body,
        }
        if thinking and thinking != "off":
            kwargs["reasoning_effort"] = thinking
        if self.settings.max_output_tokens:
            kwargs["max_completion_tokens"] = self.settings.max_output_tokens
        client = self.client
        retries = retries_within(request.budget, kwargs["timeout"], self.settings.max_retries)
        if retries != self.settings.max_retries:
            client = client.with_options(max_retries=retries)
        with observe_model_call(model) as call:  # a span, tokens and cost for the metrics
            abort.check()
            stream = client.chat.completions.create(**kwargs)
            try:
                with abort.closing(_cutter(stream)):  # a stop cuts the response mid-stream
                    completion = fold_stream(
                        call.watch(stream),
                        request.on_text,
                        limit=self.settings.max_reply_chars,
                        on_chunk=request.on_chunk,
                    )
            except Exception as exc:
                if abort.aborted():
                    raise abort.Aborted("stopped during the model call") from exc
                raise
            call.usage = completion.usage
        return completion

    def known_models(self) -> frozenset[str] | None:
        """Model ids the endpoint lists (cached); None if it cannot say."""
        if self._models is None:
            try:
                page = self.client.models.list(timeout=min(5.0, self.settings.request_timeout))
                self._models = frozenset(m.id for m in page.data)
            except openai.OpenAIError:
                return None
        return self._models


@dataclass(kw_only=True)
class _Capped:
    """Pieces of a streamed string, kept up to ``limit`` characters; the rest only counted."""

    limit: int
    parts: list[str] = field(default_factory=list)
    kept: int = 0
    seen: int = 0

    def add(self, piece: str) -> None:
        self.seen += len(piece)
        room = self.limit - self.kept
        if room > 0:
            piece = piece[:room]
            self.parts.append(piece)
            self.kept += len(piece)

    @property
    def cut(self) -> int:
        return self.seen - self.kept

    def text(self) -> str:
        return "".join(self.parts)


@dataclass(kw_only=True)
class _CallSlot:
    id: str = ""
    name: str = ""
    arguments: _Capped


def fold_stream(
    stream: Any,
    on_text: Callable[[int], None] | None = None,
    *,
    limit: int,
    on_chunk: Callable[[], None] | None = None,
) -> Completion:
    """Fold chat-completion chunks into one :class:`Completion`, keeping at most ``limit``
    characters of text and of each call's arguments (``on_text`` gets the running count;
    ``on_chunk`` is called for every chunk)."""
    text = _Capped(limit=limit)
    calls: dict[int, _CallSlot] = {}
    usage = Usage()
    finish = ""
    with stream:
        for chunk in stream:
            if on_chunk:
                on_chunk()
            if chunk.usage is not None:
                usage = Usage(
                    prompt_tokens=chunk.usage.prompt_tokens or 0,
                    completion_tokens=chunk.usage.completion_tokens or 0,
                )
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta.content:
                    text.add(delta.content)
                    if on_text:
                        on_text(text.seen)
                for tc in delta.tool_calls or ():
                    slot = calls.setdefault(tc.index, _CallSlot(arguments=_Capped(limit=limit)))
                    slot.id = tc.id or slot.id
                    if tc.function is not None:
                        slot.name = (slot.name + (tc.function.name or ""))[:MAX_NAME_CHARS]
                        slot.arguments.add(tc.function.arguments or "")
    return _completion(text, calls, usage, finish)


def _completion(
    text: _Capped, calls: dict[int, _CallSlot], usage: Usage, finish: str
) -> Completion:
    tool_calls = tuple(
        ToolCallRequest(
            id=c.id or f"call_{i}",
            name=c.name,
            arguments=c.arguments.text(),
            cut_chars=c.arguments.cut,
        )
        for i, c in sorted(calls.items())
    )
    content = text.text()
    if text.cut:
        content += "\n" + cut_note(text.cut)
    return Completion(
        content=content,
        tool_calls=tool_calls,
        usage=usage,
        finish_reason=finish,
        cut_chars=text.cut + sum(c.arguments.cut for c in calls.values()),
    )
