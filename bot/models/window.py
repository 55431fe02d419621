"""Fitting a call's messages into the model's context window (pure).

The order is fixed (docs/models.md, "Threads that outgrow the window"):

1. old tool results (every step's but the last) are cut to a short head and a note;
2. older turns (everything between the system prompt and the latest user message) are
   compacted into a summary, written by one model call over a bounded material in which
   the people's words are kept longest (:func:`summary_material`);
3. still too long: every tool result and the current turn's own texts are cut harder.

The system prompt and the latest user message are never dropped. The summary lives in the
system message, after :data:`SUMMARY_MARK`, so a later compaction folds it into the next.
This module decides what goes; :mod:`bot.agent.compaction` runs it before each call and
makes the summarizing call, and ``/context`` reads the same counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.config import Settings
from bot.models import tokens
from bot.models.catalog import resolve
from bot.text.untrusted import untrusted

Message = dict[str, Any]

SUMMARY_MARK = "\n\n[Summary of the earlier conversation, made to fit the model's window]\n"
"""Where the system message's summary starts (what is before it is the system prompt)."""
SUMMARY_SOURCE = "summary"
"""The summary reaches the model wrapped as untrusted data from this source: it was written
from tool results and other runs' results too, so it never speaks as the system prompt
(docs/architecture.md, "Untrusted content")."""
SUMMARY_INSTRUCTION = (
    "You compact a long chat thread so it fits a model's context window. Write a faithful "
    "summary of the conversation below in at most {words} words: who asked what (keep the "
    "people's own words where they matter), what was answered and decided, facts, names, "
    "numbers, files and links that later turns may need, and what is still open. Plain "
    "text, no preamble."
)
"""The summarizing call's system prompt (``{words}``: its size limit)."""
TOOL_HEAD_CHARS = 300
"""An old tool result keeps this many characters when trimmed."""
HARD_HEAD_CHARS = 120
"""What any tool result or the turn's own text keeps when trimmed harder."""
DEFAULT_RESERVE = 4_096
"""Output tokens kept free when the model has no ``max_output_tokens``, at most an eighth
of its window."""
COMPACT_TO = 0.5
"""A compaction keeps of the older turns at most this share of the room the rest of the
request (system prompt, tools, the current turn, the summary) leaves, so the next turns
fit without compacting again at once."""
SUMMARY_SHARE = 0.125
"""The summary is at most this share of the window."""
MAX_SUMMARY_CHARS = 8_000
"""And never longer than this many characters."""


@dataclass(frozen=True, kw_only=True)
class Window:
    """Where a call must fit.

    Attributes:
        model: The model's name (its tokenizer, :mod:`bot.models.tokens`).
        limit: Its context window, in tokens.
        reserve: Tokens kept free for its answer.
    """

    model: str
    limit: int
    reserve: int

    @property
    def room(self) -> int:
        """Tokens the messages and tools may take."""
        return max(1, self.limit - self.reserve)

    @property
    def summary_chars(self) -> int:
        return min(MAX_SUMMARY_CHARS, int(self.limit * SUMMARY_SHARE) * tokens.CHARS_PER_TOKEN)

    def count(self, messages: Sequence[Message], tools: Sequence[Message]) -> int:
        return tokens.fit_count(messages, tools, model=self.model, limit=self.room)

    def fits(self, messages: Sequence[Message], tools: Sequence[Message]) -> bool:
        return self.count(messages, tools) <= self.room

    def smaller(self, tokens_: int) -> Window:
        """The window for a retry after the server refused a request of ``tokens_``: at most
        three quarters of it (the configured window was wrong, or unknown)."""
        limit = min(self.limit, int(tokens_ * 0.75) + self.reserve)
        return Window(model=self.model, limit=max(limit, self.reserve + 1), reserve=self.reserve)


def window(limit: int | None, *, model: str, max_output: int | None = None) -> Window | None:
    """The window of ``model`` (None: unknown, nothing is done before a call)."""
    if not limit or limit <= 0:
        return None
    reserve = min(max_output or DEFAULT_RESERVE, limit // 8)
    return Window(model=model, limit=limit, reserve=reserve)


def window_for(settings: Settings | None, model_name: str) -> Window | None:
    """The window of ``model_name`` (None: no settings, or its window is unknown)."""
    if settings is None:
        return None
    target = resolve(settings, model_name)
    return window(target.context_window, model=target.model, max_output=target.max_output_tokens)


# --- the parts of a request ---------------------------------------------------------------


def head_end(messages: Sequence[Message]) -> int:
    """Index after the leading system message(s)."""
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    return i


def latest_user(messages: Sequence[Message]) -> int:
    """Index of the latest user message (len(messages) when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages)


def last_step(messages: Sequence[Message]) -> int:
    """Index of the last assistant message (its tool results follow it)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return len(messages)


def split_summary(system: str) -> tuple[str, str]:
    """A system message's prompt and summary ("" when it has none), unwrapped."""
    prompt, mark, wrapped = system.partition(SUMMARY_MARK)
    if not mark:
        return prompt, ""
    head = untrusted(SUMMARY_SOURCE, "\x00").partition("\x00")
    summary = wrapped.removeprefix(head[0]).removesuffix(head[2])
    return prompt, summary


def with_summary(messages: list[Message], summary: str) -> list[Message]:
    """``messages`` whose system message carries ``summary`` (replacing an older one),
    wrapped as untrusted data."""
    if not summary:
        return list(messages)
    block = SUMMARY_MARK + untrusted(SUMMARY_SOURCE, summary)
    if messages and messages[0].get("role") == "system":
        prompt, _ = split_summary(str(messages[0].get("content") or ""))
        return [{**messages[0], "content": prompt + block}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def summary_of(messages: Sequence[Message]) -> str:
    """The summary the system message carries ("" none)."""
    if messages and messages[0].get("role") == "system":
        return split_summary(str(messages[0].get("content") or ""))[1]
    return ""


# --- trimming ------------------------------------------------------------------------------


def cut(text: str, keep: int) -> str:
    """``text``'s first ``keep`` characters (at a line or word end when one is near) and a
    note of what was left out."""
    if len(text) <= keep + 80:
        return text
    head = text[:keep]
    for stop in ("\n", ". ", " "):
        at = head.rfind(stop)
        if at > keep // 2:
            head = head[: at + len(stop)].rstrip()
            break
    return f"{head}\n[… {len(text) - len(head):,} more characters cut to fit the model's window]"


def trim_tool_results(
    messages: Sequence[Message], *, keep: int = TOOL_HEAD_CHARS, upto: int | None = None
) -> list[Message]:
    """``messages`` with each tool result before index ``upto`` (default: the last step's
    results stay whole) cut to ``keep`` characters and a note."""
    end = last_step(messages) if upto is None else upto
    out: list[Message] = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if i < end and message.get("role") == "tool" and isinstance(content, str):
            message = {**message, "content": cut(content, keep)}
        out.append(message)
    return out


def trim_hard(messages: Sequence[Message], *, keep: int = HARD_HEAD_CHARS) -> list[Message]:
    """Every tool result and every assistant text after the latest user message cut to
    ``keep`` characters, and assistant texts before it too (the system prompt and the
    people's words stay)."""
    out: list[Message] = []
    for message in trim_tool_results(messages, keep=keep, upto=len(messages)):
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str):
            message = {**message, "content": cut(content, keep)}
        out.append(message)
    return out


# --- compaction ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a compaction replaces: ``messages[start:end]`` (and the old summary) by a new
    summary. ``end - start`` messages are covered."""

    start: int
    end: int

    @property
    def covered(self) -> int:
        return self.end - self.start


def plan_compaction(
    messages: Sequence[Message], tools: Sequence[Message], win: Window
) -> Plan | None:
    """The oldest messages between the system prompt and the latest user message whose
    replacement by a summary leaves of them at most :data:`COMPACT_TO` of the room the rest
    of the request leaves; None when there is nothing to compact."""
    start, stop = head_end(messages), latest_user(messages)
    if stop <= start:
        return None
    fixed = win.count([*messages[:start], *messages[stop:]], tools) + win.summary_chars // 4
    target = fixed + int(max(0, win.room - fixed) * COMPACT_TO)
    sizes = [tokens.estimate_messages([m]) for m in messages[start:stop]]
    rest = sum(sizes)
    end = start
    while end < stop and fixed + rest > target:
        rest -= sizes[end - start]
        end += 1
    end = _clean_boundary(messages, end, stop)
    return Plan(start=start, end=end) if end > start else None


def _clean_boundary(messages: Sequence[Message], end: int, stop: int) -> int:
    """``end`` moved on past tool results (never leave one without its call) to a user
    message when one is near."""
    while end < stop and messages[end].get("role") == "tool":
        end += 1
    for j in range(end, min(stop, end + 4)):
        if messages[j].get("role") == "user":
            return j
    return end


def apply_compaction(messages: Sequence[Message], plan: Plan, summary: str) -> list[Message]:
    """``messages`` with the planned ones replaced by ``summary`` in the system message."""
    kept = [*messages[: plan.start], *messages[plan.end :]]
    return with_summary(kept, summary)


def summary_request(messages: Sequence[Message], plan: Plan, win: Window) -> list[Message]:
    """The summarizing call's messages: its instruction and the material (the old summary
    and the covered messages), bounded to fit the window."""
    room_chars = int(
        (win.room - win.summary_chars // tokens.CHARS_PER_TOKEN - 200)
        * tokens.CHARS_PER_TOKEN
        / tokens.SAFETY_MARGIN
    )
    material = summary_material(
        summary_of(messages), messages[plan.start : plan.end], max_chars=max(1_000, room_chars)
    )
    words = max(50, win.summary_chars // 7)
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTION.format(words=words)},
        {"role": "user", "content": material},
    ]


def summary_material(previous: str, messages: Sequence[Message], *, max_chars: int) -> str:
    """The text a summary is written from, at most ``max_chars``: the earlier summary, then
    each message as a line. When too long, tool results go first (to a short head, then a
    mention), then the assistant's texts are shortened, then the oldest lines go; the
    people's words are kept longest (pure)."""
    for tool_keep, said_keep in ((None, None), (TOOL_HEAD_CHARS, None), (0, None), (0, 300)):
        lines = [_line(m, tool_keep=tool_keep, said_keep=said_keep) for m in messages]
        text = _joined(previous, lines)
        if len(text) <= max_chars:
            return text
    while lines and len(_joined(previous, lines)) > max_chars:
        others = [i for i, line in enumerate(lines) if not line.startswith("user:")]
        lines.pop(others[0] if others else 0)
    text = _joined(previous, lines)
    return text if len(text) <= max_chars else text[-max_chars:]


def _joined(previous: str, lines: list[str]) -> str:
    head = f"Summary so far:\n{previous}\n\nThen:\n" if previous else ""
    return head + "\n".join(lines)


def _line(message: Message, *, tool_keep: int | None, said_keep: int | None) -> str:
    role = str(message.get("role") or "")
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    calls = message.get("tool_calls") or ()
    if role == "tool":
        if tool_keep == 0:
            return f"tool: [a result of {len(text):,} characters]"
        return "tool: " + (text if tool_keep is None else cut(text, tool_keep))
    if role == "assistant":
        names = [str((c.get("function") or {}).get("name")) for c in calls if isinstance(c, dict)]
        said = text if said_keep is None else cut(text, said_keep)
        called = f" [called {', '.join(names)}]" if names else ""
        return f"assistant: {said}{called}"
    return f"{role}: {text}"
