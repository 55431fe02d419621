"""An in-process model: a Python function decides every answer, no server in between.

:class:`FunctionModel` is a :class:`~bot.agent.completion.ChatModel` (as pydantic-ai's
``FunctionModel``): each completion calls your function with the request, as the same
read-only :class:`~bot.demo.replies.ChatRequest` a :class:`~bot.testing.FakeOpenAI`
script gets, and turns the :class:`Text` or :class:`ToolCalls` it returns into the
completion the agent loop reads, with usage (the reply's own, else estimated as the wire
fake does). So one script, a :class:`~bot.testing.ScriptedModel` too, serves both::

    model = FunctionModel(ScriptedModel(default=Text("hi")))
    body = SubagentBody(deps=deps, model=model)

Use it for unit tests of the agent loop in one process; a run in a forked worker talks to
its model over HTTP, so end-to-end tests keep :class:`~bot.testing.FakeOpenAI`. HTTP
failures (:class:`~bot.testing.Fail`, :class:`~bot.testing.Hang`) belong to the wire fake, and raise here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bot.agent.completion import Completion, CompletionRequest, ToolCallRequest
from bot.demo.replies import ChatRequest, Reply, Text, ToolCalls
from bot.demo.wire import usage as wire_usage
from bot.types import Usage

__all__ = ["FunctionModel"]


class FunctionModel:
    """A model whose answers ``function`` decides, called in the caller's thread.

    Args:
        function: ``(ChatRequest) -> Text | ToolCalls`` (a sync script).
        models: What :meth:`known_models` says the endpoint lists (None: it cannot say).

    Attributes:
        requests: Every request it was asked, in order.
    """

    def __init__(
        self,
        function: Callable[[ChatRequest], Any],
        *,
        models: Sequence[str] | None = None,
    ) -> None:
        self.function = function
        self.models = None if models is None else frozenset(models)
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return "function://in-process"

    def known_models(self) -> frozenset[str] | None:
        return self.models

    def complete(self, request: CompletionRequest) -> Completion:
        """The function's answer to this request, as the agent loop reads it.

        Raises:
            TypeError: The function returned something else than ``Text``/``ToolCalls``.
        """
        body: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
        seen = ChatRequest.from_body(body)
        with self._lock:
            index = len(self.requests)
            self.requests.append(seen)
        reply: Reply = self.function(seen)
        if not isinstance(reply, Text | ToolCalls):
            raise TypeError(f"FunctionModel answers Text or ToolCalls, not {reply!r}")
        if reply.delay:
            time.sleep(reply.delay)
        if request.on_chunk:
            request.on_chunk()
        content = reply.content or ""
        if request.on_text and content:
            request.on_text(len(content))
        return _completion(reply, seen, index)


def _completion(reply: Text | ToolCalls, request: ChatRequest, index: int) -> Completion:
    counted = wire_usage(reply, request)
    calls = tuple(
        ToolCallRequest(
            id=call.id or f"call_{index}_{i}",
            name=call.name,
            arguments=call.arguments_json(),
        )
        for i, call in enumerate(reply.calls if isinstance(reply, ToolCalls) else ())
    )
    return Completion(
        content=reply.content or "",
        tool_calls=calls,
        usage=reply.usage  # the reply's own, whole (cached, reasoning, estimated)
        or Usage(
            prompt_tokens=counted["prompt_tokens"], completion_tokens=counted["completion_tokens"]
        ),
        finish_reason="tool_calls" if calls else "stop",
    )
