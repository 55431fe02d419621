"""Scripted models: decide, per chat-completions request, what the fake model answers.

A *script* is any callable ``(ChatRequest) -> Reply`` (sync or async). :class:`FakeOpenAI
<bot.testing.fake_openai.FakeOpenAI>` evaluates it inside the server for every request, so
requests from forked worker processes are answered by the same script.

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

import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeAlias

from bot.types import Usage

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
    "demo_model",
    "has_tool",
    "is_subagent",
    "last_role",
    "message_text",
    "system_contains",
    "user_contains",
]


@dataclass(frozen=True)
class Text:
    """An assistant text answer (``finish_reason: stop``).

    Attributes:
        content: The text.
        delay: Seconds to wait before answering (or before the first stream chunk).
        usage: Explicit token counts; estimated from the characters when ``None``.
        chunk_delay: Seconds between stream chunks, to make token progress observable.
    """

    content: str
    _: KW_ONLY
    delay: float = 0.0
    usage: Usage | None = None
    chunk_delay: float = 0.0


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
class ToolCalls:
    """An assistant message with tool calls (``finish_reason: tool_calls``).

    Attributes:
        calls: The calls, in order; each gets its stream ``index``.
        content: Optional text the model says alongside the calls.
        delay: Seconds to wait before answering.
        usage: Explicit token counts; estimated when ``None``.
        chunk_delay: Seconds between stream chunks.
    """

    calls: Sequence[Call]
    _: KW_ONLY
    content: str | None = None
    delay: float = 0.0
    usage: Usage | None = None
    chunk_delay: float = 0.0


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
    """fanbot convention: subagent requests never offer ``sessions_spawn``."""
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


# --- The offline demo model used by ``fanbot console`` without a model endpoint. ---

_GREETINGS = frozenset({"hi", "hello", "hey", "help", "hallo", "yo", "start"})
_DEMO_ROLES = (
    ("Research", "Research the key facts, options and trade-offs for: {topic}"),
    ("Outline", "Draft a short, structured outline answering: {topic}"),
    ("Review", "List the risks, open questions and pitfalls of: {topic}"),
)


def _is_greeting(text: str) -> bool:
    words = [w.strip("!?.,:;") for w in text.lower().split()]
    if len(text) < 12 or " ".join(words) in _GREETINGS:
        return True
    return bool(words) and words[0] in _GREETINGS - {"help"} and len(words) <= 4


def _demo_main(request: ChatRequest) -> Reply:
    if request.last_role == "tool":
        started = 0
        for message in reversed(request.messages):
            if message.get("role") != "tool":
                break
            started += 1
        noun = "subagent" if started == 1 else "subagents"
        return Text(f"Started {started} {noun}; each will announce its result in this thread.")
    topic = " ".join(request.last_user_message.split())
    if _is_greeting(topic):
        return Text(
            "Hi! I'm fanbot running the **offline demo model** (no LLM endpoint configured). "
            "Ask me for something bigger, e.g. *compare Redis streams and Kafka for an "
            "outbox*, and I'll fan the work out to three subagents that report back here."
        )
    calls = [
        Call(
            "sessions_spawn", {"task": task.format(topic=topic), "label": label, "cleanup": "keep"}
        )
        for label, task in _DEMO_ROLES
    ]
    return ToolCalls(calls, content=None)


def _demo_subagent(request: ChatRequest, delay: float) -> Reply:
    if request.has_tool("current_time") and not request.tool_results:
        return ToolCalls([Call("current_time", {})])
    task = " ".join(request.last_user_message.split()) or "(no task)"
    times = [r.content for r in request.tool_results if r.name == "current_time"]
    lines = [
        f"**Result** for: {task}",
        "",
        "- Scope: summarised the request into three concrete points.",
        "- Finding: the main trade-off is speed of delivery versus robustness.",
        "- Next step: run `fanbot subagents list` to see every run of this thread.",
    ]
    if times:
        lines.append(f"- Checked the clock: {times[-1]}")
    lines += ["", "_(offline demo model — connect a real model for real answers)_"]
    return Text("\n".join(lines), delay=delay)


def demo_model(*, subagent_delay: float = 1.5) -> ScriptedModel:
    """The deterministic offline model behind ``fanbot console`` without an endpoint.

    Main agent (offered ``sessions_spawn``): greets short messages; otherwise spawns three
    subagents (Research, Outline, Review) in one response, then confirms once the tool
    results are in. Subagents call ``current_time`` if offered, then answer a short
    markdown result about their task after ``subagent_delay`` seconds.
    """
    return (
        ScriptedModel()
        .on(has_tool("sessions_spawn"), _demo_main)
        .on(is_subagent, lambda request: _demo_subagent(request, subagent_delay))
    )
