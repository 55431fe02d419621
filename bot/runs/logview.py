"""What a run's log shows, for ``/subagents log`` and the ``sessions_history`` tool alike.

"Last K of M": K messages shown, of the M the whole transcript holds (every kind).
By default the log is the conversation: system, user and assistant text. An assistant
message that also calls tools shows its text only; one that only calls tools, and the tool
results, are left out. With ``tools`` every message is shown, tool calls and results
included (``tools`` adds, it never narrows).

:func:`select_log` decides (pure, table-tested); :func:`read_log` reads what it needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.store.transcripts import TranscriptStore

LOG_SCAN = 2_000
"""Newest transcript messages read to pick the conversation out of (without ``tools``)."""

Message = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class LogView:
    """The newest messages of a log and how many the transcript holds.

    Attributes:
        messages: At most ``limit`` messages, oldest first, as they are to be shown.
        total: Messages in the whole transcript, of every kind ("last K of M" counts the
            transcript, not only what the log shows).
    """

    messages: tuple[Message, ...]
    total: int


def visible(message: Message, *, tools: bool) -> Message | None:
    """``message`` as the log shows it, or None when the log leaves it out."""
    if tools:
        return message
    if message.get("role") == "tool":
        return None
    if not message.get("tool_calls"):
        return message
    if not _has_text(message.get("content")):
        return None
    return {k: v for k, v in message.items() if k != "tool_calls"}


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and bool(content)


def select_log(
    messages: Sequence[Message], *, limit: int, tools: bool, length: int | None = None
) -> LogView:
    """The log of the newest ``messages`` of a transcript of ``length`` messages.

    ``messages`` must hold at least the newest ``limit`` with ``tools``; without, the
    conversation is picked out of what it holds. ``length`` defaults to ``len(messages)``.
    """
    length = len(messages) if length is None else length
    kept = [v for m in messages if (v := visible(m, tools=tools)) is not None]
    shown = tuple(kept[-limit:]) if limit > 0 else ()
    return LogView(messages=shown, total=max(length, len(messages)))


def read_log(
    transcripts: TranscriptStore, key: str, *, limit: int, tools: bool, scan: int = LOG_SCAN
) -> LogView:
    """The log of the transcript under ``key`` (live or archived); without ``tools`` the
    conversation is picked out of the newest ``scan`` messages."""
    length = transcripts.length_key(key)
    messages = transcripts.read_key(key, last=limit if tools else scan)
    return select_log(messages, limit=limit, tools=tools, length=length)
