"""Scripted models: decide, per chat-completions request, what the fake model answers.

A *script* is any callable ``(ChatRequest) -> Reply`` (sync or async). :class:`FakeOpenAI
<bot.testing.fake_openai.FakeOpenAI>` evaluates it inside the server for every request, so
requests from forked worker processes are answered by the same script. The replies
(:class:`Text`, :class:`ToolCalls`, :class:`Fail`, :class:`Hang`) and :class:`ChatRequest`
come from :mod:`bot.demo.replies`, which the console's offline demo model uses too.

:class:`ScriptedModel` is the ergonomic way to write one::

    model = (
        ScriptedModel(default=Text("ok"))
        .on(has_tool("sessions_spawn"), ToolCalls([Call("sessions_spawn", {"task": "x"})]))
        .on("boom", [Fail(status=429, retry_after=0.1), Text("recovered")])
    )

Rules match on request *content*, never on arrival order, because concurrent requests from
several processes arrive in no particular order.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from bot.demo.replies import (
    Call,
    ChatRequest,
    Fail,
    Hang,
    Reply,
    Script,
    Text,
    ToolCalls,
    ToolResult,
    message_text,
)

__all__ = [
    "Call",
    "ChatRequest",
    "Fail",
    "Hang",
    "Reply",
    "Script",
    "ScriptedModel",
    "Text",
    "ToolCalls",
    "ToolResult",
    "has_tool",
    "is_subagent",
    "last_role",
    "message_text",
    "system_contains",
    "user_contains",
]


Predicate: TypeAlias = Callable[[ChatRequest], bool]
Responder: TypeAlias = Reply | Sequence[Reply] | Script | str


def user_contains(text: str) -> Predicate:
    """Match requests whose last user message contains ``text``."""
    return lambda req: text in req.last_user_message


def system_contains(text: str) -> Predicate:
    """Match requests whose system prompt contains ``text``."""
    return lambda req: text in req.system_prompt


def has_tool(name: str) -> Predicate:
    """Match requests that offer the tool ``name``."""
    return lambda req: req.has_tool(name)


def last_role(role: str) -> Predicate:
    """Match requests whose last message has ``role`` (``"tool"`` after tool results)."""
    return lambda req: req.last_role == role


def is_subagent(req: ChatRequest) -> bool:
    """fanbot convention: subagent requests never offer ``sessions_spawn`` (except runs of
    an orchestrator type, when ``FANBOT_SUBAGENTS__MAX_SPAWN_DEPTH`` allows nesting)."""
    return not req.has_tool("sessions_spawn")


@dataclass(kw_only=True)
class _Rule:
    when: Predicate
    reply: Responder
    times: int | None
    used: int = 0


class ScriptedModel:
    """Ordered rules; the first matching rule with uses left answers.

    Thread-safe: the same model may serve several fakes or threads.
    """

    def __init__(self, *, default: Responder | None = None) -> None:
        """Create a model.

        Args:
            default: Answer when no rule matches. Without one, an unmatched request gets an
                HTTP 500 whose message names the request, so a test failure says why.
        """
        self._rules: list[_Rule] = []
        self._default = Text(default) if isinstance(default, str) else default
        self._lock = threading.Lock()
        self.unmatched: list[ChatRequest] = []

    def on(
        self, when: str | Predicate, reply: Responder, *, times: int | None = None
    ) -> ScriptedModel:
        """Add a rule and return ``self`` (so rules chain).

        Args:
            when: A predicate, or a substring of the last user message.
            reply: A reply (a plain string means ``Text(string)``); a list of replies answered one per matching request (the rule
                then stops matching, unless ``times`` asks for more: the last one repeats);
                or a script ``(ChatRequest) -> Reply`` called per request.
            times: How many requests this rule may answer; unlimited when ``None``
                (``len(reply)`` for a list).
        """
        predicate = user_contains(when) if isinstance(when, str) else when
        if isinstance(reply, str):
            reply = Text(reply)
        if isinstance(reply, Sequence) and times is None:
            times = len(reply)
        self._rules.append(_Rule(when=predicate, reply=reply, times=times))
        return self

    def calls(self, index: int) -> int:
        """How many requests rule number ``index`` (in ``on`` order) has answered."""
        with self._lock:
            return self._rules[index].used

    def __call__(self, request: ChatRequest) -> Reply | Awaitable[Reply]:
        for rule in self._rules:
            if not rule.when(request):
                continue
            with self._lock:
                if rule.times is not None and rule.used >= rule.times:
                    continue
                nth = rule.used
                rule.used += 1
            return _respond(rule.reply, nth, request)
        if self._default is not None:
            return _respond(self._default, 0, request)
        with self._lock:
            self.unmatched.append(request)
        return Fail(
            status=500,
            message=f"ScriptedModel: no rule matched (last user message "
            f"{request.last_user_message[:80]!r}, tools {list(request.tools)})",
        )


def _respond(reply: Responder, nth: int, request: ChatRequest) -> Reply | Awaitable[Reply]:
    if isinstance(reply, Text | ToolCalls | Fail | Hang):
        return reply
    if isinstance(reply, str):
        return Text(reply)
    if isinstance(reply, Sequence):
        item = reply[min(nth, len(reply) - 1)]
        return Text(item) if isinstance(item, str) else item
    return reply(request)
