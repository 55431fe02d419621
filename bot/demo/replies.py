"""What a scripted chat-completions server answers, and the request it answers.

A *script* is any callable ``(ChatRequest) -> Reply`` (sync or async).
:class:`~bot.demo.chat_server.ChatServer` evaluates it for every request it receives, so
requests from forked worker processes are answered by the same script. The offline demo
model (:mod:`bot.demo.model`) is one script; ``bot.testing.ScriptedModel`` builds others
from rules.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeAlias

from bot.types import FAN_IN_MARK, Usage


@dataclass(frozen=True, kw_only=True)
class Paced:
    """How an answer (:class:`Text`, :class:`ToolCalls`) streams, and the usage it reports.

    Attributes:
        delay: Seconds to wait before answering (or before the first stream chunk).
        usage: Explicit token counts; estimated from the characters when ``None``.
        chunk_delay: Seconds between stream chunks, to make token progress observable.
    """

    delay: float = 0.0
    usage: Usage | None = None
    chunk_delay: float = 0.0


@dataclass(frozen=True)
class Text(Paced):
    """An assistant text answer (``finish_reason: stop``).

    Attributes:
        content: The text.
    """

    content: str


@dataclass(frozen=True)
class Call:
    """One tool call inside a :class:`ToolCalls` reply.

    Attributes:
        name: Function name.
        arguments: A dict (JSON-encoded on the wire) or a raw string sent verbatim, which
            allows malformed JSON for bad-input tests.
        id: Tool call id; a deterministic ``call_<request>_<n>`` when ``None``.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    _: KW_ONLY
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments exactly as they go on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class ToolCalls(Paced):
    """An assistant message with tool calls (``finish_reason: tool_calls``).

    Attributes:
        calls: The calls, in order; each gets its stream ``index``.
        content: Optional text the model says alongside the calls.
    """

    calls: Sequence[Call]
    _: KW_ONLY
    content: str | None = None


@dataclass(frozen=True)
class Fail:
    """An HTTP error with an OpenAI-shaped body (``{"error": {...}}``).

    Attributes:
        status: HTTP status, e.g. 429, 500, 400.
        retry_after: Seconds for the ``retry-after`` (and ``retry-after-ms``) headers.
        message: ``error.message``.
        delay: Seconds to wait before answering.
    """

    status: int = 500
    _: KW_ONLY
    retry_after: float | None = None
    message: str = "The fake model failed on purpose."
    delay: float = 0.0


@dataclass(frozen=True)
class Hang:
    """Answer nothing for ``seconds`` (to exercise client timeouts), then answer ``then``.

    Attributes:
        seconds: How long the server sits on the request. Stopping the fake ends it early.
        then: What to answer if the client is still waiting; HTTP 504 when ``None``.
    """

    seconds: float
    _: KW_ONLY
    then: Text | ToolCalls | Fail | None = None


Reply: TypeAlias = Text | ToolCalls | Fail | Hang


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """A ``role: tool`` message seen in a request, with the name of the call it answers."""

    tool_call_id: str
    name: str
    content: str


def message_text(content: Any) -> str:
    """Message content as plain text (content may be a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """A read-only view of one chat-completions request body.

    Attributes:
        model: Requested model name.
        messages: The messages as sent (dicts).
        tools: Names of the offered function tools, in order.
        stream: Whether the client asked for SSE.
        body: The whole parsed JSON body.
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    tools: tuple[str, ...] = ()
    stream: bool = False
    body: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ChatRequest:
        """Build the view from a parsed request body."""
        tools = tuple(
            str(t.get("function", {}).get("name", ""))
            for t in body.get("tools") or ()
            if isinstance(t, Mapping)
        )
        return cls(
            model=str(body.get("model", "")),
            messages=tuple(m for m in body.get("messages") or () if isinstance(m, Mapping)),
            tools=tools,
            stream=bool(body.get("stream", False)),
            body=body,
        )

    def has_tool(self, name: str) -> bool:
        """Whether a function tool called ``name`` is offered."""
        return name in self.tools

    @property
    def last_role(self) -> str:
        """Role of the last message (``user``, ``tool``, ``assistant``...), ``""`` if none."""
        return str(self.messages[-1].get("role", "")) if self.messages else ""

    @property
    def last_user_message(self) -> str:
        """Text of the last ``role: user`` message, ``""`` if none."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return message_text(message.get("content"))
        return ""

    @property
    def is_continuation(self) -> bool:
        """The main agent's turn after a fan-in: its runs' results are in."""
        return self.last_role == "user" and self.last_user_message.startswith(FAN_IN_MARK)

    @property
    def system_prompt(self) -> str:
        """Text of all ``system``/``developer`` messages, joined by blank lines."""
        return "\n\n".join(
            message_text(m.get("content"))
            for m in self.messages
            if m.get("role") in ("system", "developer")
        )

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        """Every ``role: tool`` message so far, with the called tool's name resolved."""
        names: dict[str, str] = {}
        results: list[ToolResult] = []
        for message in self.messages:
            for call in message.get("tool_calls") or ():
                names[str(call.get("id", ""))] = str(call.get("function", {}).get("name", ""))
            if message.get("role") == "tool":
                call_id = str(message.get("tool_call_id", ""))
                results.append(
                    ToolResult(
                        tool_call_id=call_id,
                        name=names.get(call_id, ""),
                        content=message_text(message.get("content")),
                    )
                )
        return tuple(results)


Script: TypeAlias = Callable[[ChatRequest], Reply | Awaitable[Reply]]
