"""One streaming chat-completions call on the ``openai`` SDK, folded into a plain result.

The SDK's own bounded retries (``max_retries``, honouring ``Retry-After``) handle 429/5xx.
What comes back is data: the assistant's text, its tool calls and the token usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.config import OpenAISettings
from bot.types import Usage

OFFLINE_BASE_URL_HINT = "no model endpoint configured"


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """A tool call as the model asked for it (``arguments`` is the raw JSON string)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class Completion:
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


class ChatModel:
    """A chat-completions client bound to one endpoint.

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

    def close(self) -> None:
        self.client.close()

    def complete(
        self,
        *,
        model: str,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        thinking: str = "",
        timeout: float | None = None,
        on_text: Callable[[int], None] | None = None,
    ) -> Completion:
        """Run one streamed completion; ``on_text`` gets the running count of text chars."""
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": timeout or self.settings.request_timeout,
        }
        if tools:
            kwargs["tools"] = list(tools)
        if thinking and thinking != "off":
            kwargs["reasoning_effort"] = thinking
        if self.settings.max_output_tokens:
            kwargs["max_completion_tokens"] = self.settings.max_output_tokens
        client = self.client
        if timeout is not None and timeout < self.settings.request_timeout:
            # Deadline-bound call: retries would overrun the deadline.
            client = client.with_options(max_retries=0)
        stream = client.chat.completions.create(**kwargs)
        return _fold_stream(stream, on_text)

    def known_models(self) -> frozenset[str] | None:
        """Model ids the endpoint lists (cached); None if it cannot say."""
        if self._models is None:
            try:
                page = self.client.models.list(timeout=min(5.0, self.settings.request_timeout))
                self._models = frozenset(m.id for m in page.data)
            except openai.OpenAIError:
                return None
        return self._models


def _fold_stream(stream: Any, on_text: Callable[[int], None] | None) -> Completion:
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage = Usage()
    finish = ""
    with stream:
        for chunk in stream:
            if chunk.usage is not None:
                usage = Usage(
                    prompt_tokens=chunk.usage.prompt_tokens or 0,
                    completion_tokens=chunk.usage.completion_tokens or 0,
                )
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    if on_text:
                        on_text(sum(len(t) for t in text))
                for tc in delta.tool_calls or ():
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
    tool_calls = tuple(
        ToolCallRequest(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"])
        for i, c in sorted(calls.items())
    )
    return Completion(
        content="".join(text), tool_calls=tool_calls, usage=usage, finish_reason=finish
    )
