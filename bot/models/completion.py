"""What the agent loop asks of a model, as data and a small port.

:class:`ChatModel` is the port: one completion for a conversation and its tools, the
endpoint's model list, and the endpoint's address for error texts. Production uses
:class:`bot.agent.llm.OpenAIChatModel`; unit tests use ``bot.testing.FunctionModel``,
whose answers a Python function decides in-process. This module imports no SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.types import Usage


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """A tool call as the model asked for it (``arguments`` is the raw JSON string).

    ``cut_chars`` > 0: the arguments were longer than the reply limit and are cut (so are
    not valid JSON); the call must not run.
    """

    id: str
    name: str
    arguments: str
    cut_chars: int = 0


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One folded answer.

    Attributes:
        content: The text, ending with a cut note when the model said more than the limit.
        tool_calls: The calls, in stream order.
        usage: Tokens as the endpoint counted them (the whole answer, cut or not).
        finish_reason: ``stop``, ``tool_calls``, ``length``...
        cut_chars: Characters of text and tool arguments dropped by the limit.
        reasoning: The model's reasoning, when the server returned it (a
            ``reasoning_content``/``reasoning`` field or ``<think>`` text); never part of
            ``content`` nor sent back to the model.
        answered_by: The model that answered, as ``endpoint/model`` (a fallback's name when
            the asked-for model could not answer; :mod:`bot.agent.router`).
        fallback_reason: Why the models asked before ``answered_by`` did not answer
            (``gpt-4o overloaded``); "" when the asked-for model answered.
    """

    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""
    cut_chars: int = 0
    reasoning: str = ""
    answered_by: str = ""
    fallback_reason: str = ""

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    # Cut arguments are not JSON; the call's tool result says what happened.
                    "function": {"name": c.name, "arguments": "{}" if c.cut_chars else c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


@dataclass(frozen=True, kw_only=True)
class CompletionRequest:
    """One completion asked of a :class:`ChatModel`.

    Attributes:
        model: The model to ask.
        messages: The conversation, as chat-completions messages.
        tools: The offered function tools, as chat-completions tool schemas (wire JSON).
        thinking: Reasoning effort (``""``/``"off"``: none asked for).
        timeout: The run's time left: no attempt waits longer.
        budget: Seconds before the run's deadline: retries only while they fit.
        on_text: Gets the running count of text characters as they stream.
        on_chunk: Called for every piece that arrives (a sign of life).
        on_wait: Told what the call waits for before it is sent (the model's rate limit),
            again every few seconds while it waits, and ``""`` when the wait ends.
    """

    model: str
    messages: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]] = ()
    thinking: str = ""
    timeout: float | None = None
    budget: float | None = None
    on_text: Callable[[int], None] | None = None
    on_chunk: Callable[[], None] | None = None
    on_wait: Callable[[str], None] | None = None


class ChatModel(Protocol):
    """A chat-completions endpoint, as the agent loop uses it."""

    @property
    def base_url(self) -> str:
        """Where the endpoint is (named in error texts)."""
        ...

    def complete(self, request: CompletionRequest) -> Completion:
        """One answer to ``request.messages``, which may call ``request.tools``."""
        ...

    def known_models(self) -> frozenset[str] | None:
        """Model ids the endpoint lists; None if it cannot say."""
        ...
