"""How a run's end is shown: the announce and the history note (pure rendering; the run's
name and icons come from :mod:`bot.runs.naming`, durations from :mod:`bot.text.units`).

The announce is how a finished run reports back into its thread.

Template (stable; tests and users rely on it)::

    ✅ Subagent #2 "Django research" (researcher) finished
    Status: success
    Result: <final answer (a partial one for a run that did not finish), or NO_RESULT>
    Notes: <errors, partial progress, warnings — omitted when empty>
    runtime 1m02s · tokens 3.1k (in 2.4k / out 0.7k) · est $0.0012 · session key … · session id … · run id … · transcript …

The stats line ends with what finds the run's record and conversation again: the child's
session key, its session id, the run id's first 8 characters (what ``/subagents`` takes) and
the transcript's Redis key (docs/architecture.md).

The status line comes from the runtime outcome, never from model text. Token figures show
cached and reasoning tokens when there are any (``in 2.4k, 2k cached / out 0.7k, 0.5k
reasoning``) and begin with ``~`` when fanbot counted some of them because the server
reported none (:func:`token_total`, :func:`token_split`; docs/models.md). A fallback that
answered adds ``answered by local/qwen3 (gpt-4o overloaded)`` after the cost
(docs/models.md, "Fallbacks").

Sizes are bounded whatever the run produced: the result is cut to ``max_result_chars`` and
the notes to :data:`MAX_NOTES_CHARS` (each with a note), so with the default 20k one announce
is at most six Telegram or Slack messages. The full result stays in the run record and the
transcript, up to their own limits; the history note has its own bound.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bot.runs.naming import icon, run_title
from bot.steps import fallback_note
from bot.text.clip import clip
from bot.text.units import duration, tokens
from bot.text.untrusted import untrusted
from bot.types import ResultFormat, RunRecord, RunStatus, Usage

ANNOUNCE_SKIP = "ANNOUNCE_SKIP"
MAX_NOTES_CHARS = 2_000
HISTORY_NOTE_CHARS = 16_000
ENDED_VERBS = {
    RunStatus.SUCCESS: "finished",
    RunStatus.ERROR: "failed",
    RunStatus.TIMEOUT: "timed out",
    RunStatus.STOPPED: "was stopped",
    RunStatus.UNKNOWN: "ended unexpectedly",
}


QUIET_LINE = "finished without a result to show"
"""How the fan-in lists a run that answered :data:`ANNOUNCE_SKIP` (never the sentinel)."""


def is_quiet(record: RunRecord) -> bool:
    """The run succeeded with :data:`ANNOUNCE_SKIP`: it announces nothing."""
    return record.status is RunStatus.SUCCESS and record.result.strip() == ANNOUNCE_SKIP


def is_tool_message(message: Mapping[str, Any]) -> bool:
    """A transcript message that calls tools or answers a tool call."""
    return message.get("role") == "tool" or bool(message.get("tool_calls"))


def token_total(usage: Usage) -> str:
    """``3.1k``, or ``~3.1k`` when some of it was counted by fanbot (estimated)."""
    return ("~" if usage.estimated else "") + tokens(usage.total)


def token_split(usage: Usage) -> str:
    """``in 2.4k / out 0.7k``, with ``, 2k cached`` and ``, 0.5k reasoning`` when non-zero."""
    cached = f", {tokens(usage.cached_tokens)} cached" if usage.cached_tokens else ""
    reasoning = f", {tokens(usage.reasoning_tokens)} reasoning" if usage.reasoning_tokens else ""
    return (
        f"in {tokens(usage.prompt_tokens)}{cached} / out {tokens(usage.completion_tokens)}"
        f"{reasoning}"
    )


def token_extras(usage: Usage) -> str:
    """`` (2k cached, 0.5k reasoning)``: the parts with tokens, or "" when neither has."""
    parts = [
        f"{tokens(n)} {what}"
        for n, what in ((usage.cached_tokens, "cached"), (usage.reasoning_tokens, "reasoning"))
        if n
    ]
    return f" ({', '.join(parts)})" if parts else ""


def stats_line(record: RunRecord, *, ended_at: float, transcript_ref: str) -> str:
    started = record.started_at or record.created_at
    usage = record.usage
    parts = [
        f"runtime {duration(ended_at - started)}",
        f"tokens {token_total(usage)} ({token_split(usage)})",
    ]
    if record.cost_usd is not None:
        parts.append(f"est ${record.cost_usd:.4f}")
    if record.answered_by:
        parts.append(fallback_note(record.answered_by, record.fallback_reason))
    parts += [
        f"session key {record.child_session_key}",
        f"session id {record.session_id}",
        f"run id {record.run_id[:8]}",
        f"transcript {transcript_ref}",
    ]
    return " · ".join(parts)


NO_RESULT = "(none: it ended before it wrote any text)"
"""The Result of a run that wrote no text (a stop keeps the last text a run wrote)."""


def render_announce(
    record: RunRecord,
    *,
    status: RunStatus,
    result: str,
    notes: str,
    ended_at: float,
    transcript_ref: str,
    max_result_chars: int = 20_000,
) -> str:
    """The announce text for ``record`` ending with ``status`` (``record`` has final usage)."""
    verb = ENDED_VERBS.get(status, "ended")
    lines = [
        f"{icon(status)} {run_title(record, kind='after')} {verb}",
        f"Status: {status.value}",
    ]
    shown = result.strip()
    if record.result_format is ResultFormat.JSON and status is RunStatus.SUCCESS:
        shown = render_structured(shown) or shown
    body = clip(shown, max_result_chars, wording="result") if shown else NO_RESULT
    lines.append(f"Result:\n{body}" if "\n" in body else f"Result: {body}")
    if notes.strip():
        lines.append(f"Notes: {clip(notes.strip(), MAX_NOTES_CHARS, wording='result')}")
    lines.append(stats_line(record, ended_at=ended_at, transcript_ref=transcript_ref))
    return "\n".join(lines)


def render_structured(text: str, *, inline_chars: int = 100) -> str | None:
    """A structured (JSON) result made readable: an object as ``- key: value`` lines and a
    list of plain values as ``- item`` lines, when every value fits on a line of
    ``inline_chars``; anything deeper as a fenced, indented JSON block. None when ``text``
    is not JSON."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None

    def inline(item: Any) -> str | None:
        shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        return shown if len(shown) <= inline_chars and "\n" not in shown else None

    if isinstance(value, dict):
        pairs = [(str(k), inline(v)) for k, v in value.items()]
        if pairs and all(v is not None for _, v in pairs):
            return "\n".join(f"- {k}: {v}" for k, v in pairs)
    elif isinstance(value, list) and value and all(not isinstance(v, dict | list) for v in value):
        items = [inline(v) for v in value]
        if all(i is not None for i in items):
            return "\n".join(f"- {i}" for i in items)
    elif not isinstance(value, list):
        return value if isinstance(value, str) else json.dumps(value)
    return "```json\n" + json.dumps(value, ensure_ascii=False, indent=2) + "\n```"


def history_note(
    record: RunRecord, *, status: RunStatus, result: str, max_chars: int = HISTORY_NOTE_CHARS
) -> str:
    """What the main agent sees of the result in its next turn (at most ``max_chars`` of
    result, like any history entry)."""
    body = clip(result.strip(), max_chars, wording="result") if result.strip() else "(no result)"
    source = f"subagent-{record.seq}" if record.seq else "subagent"
    return (
        f"[{run_title(record, kind='after')} ended: "
        f"{status.value}; run {record.run_id[:8]}]\n{untrusted(source, body)}"
    )


def render_compact_card(record: RunRecord, *, status: RunStatus, ended_at: float) -> str:
    """The one-line announce of ``subagents.announce = "synthesis"``: the main agent's
    continuation carries the result, so the card only says how the run ended."""
    verb = ENDED_VERBS.get(status, "ended")
    started = record.started_at or record.created_at
    usage = record.usage
    facts = [duration(ended_at - started), f"{token_total(usage)} tokens{token_extras(usage)}"]
    if record.cost_usd is not None:
        facts.append(f"est ${record.cost_usd:.4f}")
    if record.answered_by:
        facts.append(fallback_note(record.answered_by, record.fallback_reason))
    return f"{icon(status)} {run_title(record, kind='after')} {verb} · " + " · ".join(facts)
