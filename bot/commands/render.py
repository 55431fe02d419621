"""Answers of ``/subagents list|info|log`` as short markdown (pure).

A run's name, icons and durations come from :mod:`bot.runs.render`, as everywhere.

Plain markdown only (bold, code spans, bullet lines), which every adapter converts to its
platform's markup. Untrusted text (tasks, results, transcript lines) is folded to one line
and stripped of backticks so it cannot break the surrounding formatting.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from bot.runs.render import (
    ICONS,
    format_duration,
    format_tokens,
    is_tool_message,
    one_line,
    run_name,
)
from bot.types import RunRecord, RunStatus

LOG_LINE_CHARS = 400
ROLE_CHARS = 20
LIST_MAX = 15
"""``/subagents list`` shows this many newest runs, so the answer fits one message."""

EMPTY_LIST = (
    "No subagents have been started here yet. Ask for something bigger and I'll fan it out."
)


def age(seconds: float) -> str:
    return f"{format_duration(seconds)} ago"


def timing(run: RunRecord, now: float) -> str:
    """Active runs: how long they exist; ended runs: how long they ran, and when."""
    if not run.status.terminal:
        since = run.started_at or run.created_at
        verb = "running for" if run.status is RunStatus.RUNNING else "waiting for"
        return f"{verb} {format_duration(now - since)}"
    ended = run.ended_at or now
    took = format_duration(ended - (run.started_at or run.created_at))
    return f"took {took}, {age(now - ended)}"


def render_list(runs: Sequence[RunRecord], *, now: float, scope: str = "this thread") -> str:
    """``/subagents list``: a header with counts, then one line per run, newest first,
    each with the run's own number (``#3``)."""
    if not runs:
        return EMPTY_LIST
    active = sum(1 for r in runs if not r.status.terminal)
    lines = [f"**Subagents in {scope}** — {active} active · {len(runs) - active} done"]
    for run in runs[:LIST_MAX]:
        lines.append(
            f"#{run.seq} {ICONS[run.status]} {run.status.value} · {run_name(run)} · "
            f"{timing(run, now)} · `{run.run_id[:8]}` · `{run.child_session_key}`"
        )
    older = runs[LIST_MAX:]
    if older:
        busy = sum(1 for r in older if not r.status.terminal)
        lines.append(
            f"…and {len(older)} older ({_span(older)}"
            + (f", {busy} of them still active" if busy else "")
            + f"); `/subagents info {older[0].seq}` and the like show any of them."
        )
    return "\n".join(lines)


def _span(runs: Sequence[RunRecord]) -> str:
    numbers = sorted(r.seq for r in runs)
    return f"#{numbers[0]}" if len(numbers) == 1 else f"#{numbers[0]}–#{numbers[-1]}"


def when(ts: float | None, now: float) -> str:
    if ts is None:
        return "—"
    stamp = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = now - ts
    return f"{stamp} ({age(delta) if delta >= 0 else 'in ' + format_duration(-delta)})"


def render_info(
    run: RunRecord,
    *,
    now: float,
    transcript_ref: str,
    archive_at: float | None,
) -> str:
    """``/subagents info``: every field a person needs to understand one run."""
    lines = [
        f"**Subagent #{run.seq}** · {ICONS[run.status]} {run.status.value} · {run_name(run)}",
        f"• Label: {one_line(run.label) or '—'}",
        f"• Task: {one_line(run.task, 300)}",
        f"• Run id: `{run.run_id}`",
        f"• Child session: `{run.child_session_key}`",
        f"• Session id: `{run.session_id}`",
        f"• Transcript: `{transcript_ref}`",
        f"• Type: {run.subagent_type} · Model: `{run.model}`"
        + (f" · thinking {run.thinking}" if run.thinking else ""),
        f"• Requested by: {run.requester}",
        f"• Created: {when(run.created_at, now)}",
        f"• Started: {when(run.started_at, now)}",
        f"• Ended: {when(run.ended_at, now)}",
        f"• Runtime: {_runtime(run, now)}",
        f"• Tokens: {format_tokens(run.usage.total)} (in {format_tokens(run.prompt_tokens)}"
        f" / out {format_tokens(run.completion_tokens)})"
        + (f" · Cost: est ${run.cost_usd:.4f}" if run.cost_usd is not None else ""),
        f"• Cleanup: {run.cleanup.value} · Archive: {_archive(run, archive_at, now)}",
    ]
    lines += _outcome(run)
    return "\n".join(lines)


def _runtime(run: RunRecord, now: float) -> str:
    if run.started_at is None:
        return "not started"
    end = run.ended_at or now
    return format_duration(end - run.started_at) + ("" if run.ended_at else " so far")


def _archive(run: RunRecord, archive_at: float | None, now: float) -> str:
    if run.archived_at is not None:
        return f"archived {when(run.archived_at, now)}"
    if archive_at is not None:
        return f"due {when(archive_at, now)}"
    return "after it ends" if not run.status.terminal else "not scheduled"


def _outcome(run: RunRecord) -> list[str]:
    if not run.status.terminal:
        partial = one_line(run.result, 300)
        return [f"• Progress: {partial}"] if partial else []
    lines = [f"• Outcome: {run.status.value}"]
    if run.result.strip():
        lines.append(f"• Result: {one_line(run.result, 300)}")
    if run.notes.strip():
        label = "Error" if run.status in (RunStatus.ERROR, RunStatus.UNKNOWN) else "Notes"
        lines.append(f"• {label}: {one_line(run.notes, 300)}")
    return lines


def render_log(
    run: RunRecord,
    *,
    messages: Sequence[Mapping[str, Any]],
    limit: int,
    tools_only: bool,
) -> str:
    """``/subagents log``: the last ``limit`` transcript messages, one bullet each."""
    picked = [m for m in messages if is_tool_message(m)] if tools_only else list(messages)
    shown = picked[-limit:] if limit else []
    kind = "tool messages" if tools_only else "messages"
    head = (
        f"**Log of subagent #{run.seq}** · {run_name(run)} — "
        f"last {len(shown)} of {len(picked)} {kind}"
    )
    if not shown:
        return head + "\n(nothing yet)"
    return "\n".join([head, *(f"• {log_line(m)}" for m in shown)])


def log_line(message: Mapping[str, Any]) -> str:
    """One transcript message as ``role: text`` (tool calls as ``name(args)``).

    Tolerates any JSON shape (a transcript holds what models and tools produced), and
    stays within :data:`LOG_LINE_CHARS` plus the role.
    """
    role = one_line(str(message.get("role", "?")), ROLE_CHARS).replace("*", "") or "?"
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        parts.append(content)
    elif isinstance(content, list):
        parts.append(" ".join(str(p.get("text", "")) for p in content if isinstance(p, dict)))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        parts.append(f"🔧 {fn.get('name', '?')}({_args(fn.get('arguments', ''))})")
    text = one_line(" ".join(parts), LOG_LINE_CHARS) or "(empty)"
    return f"**{role}**: {text}"


def _args(raw: Any) -> str:
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except (json.JSONDecodeError, RecursionError):  # models write broken JSON too
        return str(raw)
    if isinstance(data, dict):
        return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in data.items())
    return json.dumps(data, ensure_ascii=False)


__all__ = [
    "EMPTY_LIST",
    "is_tool_message",
    "log_line",
    "one_line",
    "render_info",
    "render_list",
    "render_log",
    "run_name",
    "timing",
]
