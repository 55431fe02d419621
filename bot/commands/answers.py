"""Answers of ``/subagents list|info|log`` as short markdown (pure).

A run's name, icons and durations come from :mod:`bot.runs.render`, as everywhere.

Plain markdown only (bold, code spans, bullet lines), which every adapter converts to its
platform's markup. Untrusted text (tasks, results, transcript lines) is folded to one line
and stripped of backticks so it cannot break the surrounding formatting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bot.runs.budget import RunSpend, spend_text
from bot.runs.logview import LogView
from bot.runs.naming import ICONS, Icon, one_line, run_name, run_title
from bot.runs.render import is_tool_message, token_split, token_total
from bot.text.units import ago, duration, utc_stamp
from bot.types import RunRecord, RunStatus, Usage

LOG_LINE_CHARS = 400
ROLE_CHARS = 20
LIST_MAX = 15
"""``/subagents list`` shows this many newest runs, so the answer fits one message."""

EMPTY_LIST = (
    "No subagents have been started here yet. Ask for something bigger and I'll fan it out."
)


def timing(run: RunRecord, now: float) -> str:
    """Active runs: how long they exist; ended runs: how long they ran, and when."""
    if not run.status.terminal:
        since = run.started_at or run.created_at
        verb = "running for" if run.status is RunStatus.RUNNING else "waiting for"
        return f"{verb} {duration(now - since)}"
    ended = run.ended_at or now
    took = duration(ended - (run.started_at or run.created_at))
    return f"took {took}, {ago(now - ended)}"


def render_list(
    runs: Sequence[RunRecord], *, now: float, scope: str = "this thread", line: Sequence[str] = ()
) -> str:
    """``/subagents list``: a header with counts, then one line per run, newest first,
    each with the run's own number (``#3``); a queued run in ``line`` (job ids in the order
    they start) shows its place (``queued #2 in line``)."""
    if not runs:
        return EMPTY_LIST
    active = sum(1 for r in runs if not r.status.terminal)
    lines = [f"**Subagents in {scope}** — {active} active · {len(runs) - active} done"]
    roots, children = _tree(runs)
    for root in roots[:LIST_MAX]:
        for run, depth in _walk(root, children, 0):
            lead = "  " * depth + ("└ " if depth else "")
            lines.append(
                f"{lead}{run_title(run, noun='', name='none')} {ICONS[run.status]} "
                f"{_state(run)}{_place(run, line)} · "
                f"{run_name(run)} · "
                f"{timing(run, now)} · {spend(run)} · `{run.run_id[:8]}`"
                + ("" if depth else f" · `{run.child_session_key}`")
            )
    older = roots[LIST_MAX:]
    if older:
        busy = sum(1 for r in older if not r.status.terminal)
        lines.append(
            f"…and {len(older)} older ({_span(older)}"
            + (f", {busy} of them still active" if busy else "")
            + f"); `/subagents info {older[0].seq}` and the like show any of them."
        )
    return "\n".join(lines)


def _tree(
    runs: Sequence[RunRecord],
) -> tuple[list[RunRecord], dict[str, list[RunRecord]]]:
    """Top-level runs (in the given order) and each run's children (oldest first)."""
    ids = {r.run_id for r in runs}
    children: dict[str, list[RunRecord]] = {}
    for run in sorted(runs, key=lambda r: r.seq):
        if run.parent_run_id in ids:
            children.setdefault(run.parent_run_id, []).append(run)
    return [r for r in runs if r.parent_run_id not in ids], children


def _walk(
    run: RunRecord, children: dict[str, list[RunRecord]], depth: int
) -> list[tuple[RunRecord, int]]:
    found = [(run, depth)]
    for child in children.get(run.run_id, []):
        found += _walk(child, children, depth + 1)
    return found


def _place(run: RunRecord, line: Sequence[str]) -> str:
    if run.status is not RunStatus.QUEUED or run.job_id not in line:
        return ""
    return f" #{list(line).index(run.job_id) + 1} in line"


def _state(run: RunRecord) -> str:
    if not run.status.terminal and run.parked_at is not None:  # queued: a held spawn
        return "waiting for approval" if run.approval_id else "waiting for its subagents"
    if run.status is RunStatus.RUNNING and run.waiting:
        return run.waiting
    return run.status.value


def spend(run: RunRecord) -> str:
    """``1.2k tok $0.0012``: what the run has spent so far."""
    cost = f" ${run.cost_usd:.4f}" if run.cost_usd is not None else ""
    return f"{token_total(run.usage)} tok{cost}"


def render_family(run: RunRecord, tree: Sequence[RunRecord]) -> list[str]:
    """``/subagents info`` lines for a run in a tree: its parent, children and the tree's
    spend (``tree``: every run of its tree)."""
    if len(tree) <= 1:
        return []
    by_id = {r.run_id: r for r in tree}
    lines = []
    parent = by_id.get(run.parent_run_id)
    if parent is not None:
        lines.append(
            f"• Parent: {run_title(parent, noun='', name='none')} {ICONS[parent.status]} "
            f"{run_name(parent)}"
        )
    kids = sorted((r for r in tree if r.parent_run_id == run.run_id), key=lambda r: r.seq)
    if kids:
        listed = ", ".join(
            f"{run_title(k, noun='', name='none')} {ICONS[k.status]} {_state(k)}" for k in kids
        )
        lines.append(f"• Children: {listed}")
    used = sum((r.usage for r in tree), Usage())
    costs = [r.cost_usd for r in tree if r.cost_usd is not None]
    money = f" · est ${sum(costs):.4f}" if costs else ""
    lines.append(
        f"• Tree: {len(tree)} runs (depth {run.depth}) · {token_total(used)} tokens{money}"
    )
    return lines


def _span(runs: Sequence[RunRecord]) -> str:
    numbers = sorted(r.seq for r in runs)
    first, last = (run_title(n, noun="", name="none") for n in (numbers[0], numbers[-1]))
    return first if len(numbers) == 1 else f"{first}–{last}"


def when(ts: float | None, now: float) -> str:
    if ts is None:
        return "—"
    stamp = utc_stamp(ts)
    delta = now - ts
    return f"{stamp} ({ago(delta) if delta >= 0 else 'in ' + duration(-delta)})"


def render_info(
    run: RunRecord,
    *,
    now: float,
    transcript_ref: str,
    archive_at: float | None,
    spend: RunSpend | None = None,
) -> str:
    """``/subagents info``: every field a person needs to understand one run (``spend``:
    its and its tree's spend against their limits)."""
    lines = [
        f"**{run_title(run, name='none')}** · {ICONS[run.status]} {run.status.value} · "
        f"{run_name(run)}",
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
        f"• Tokens: {token_total(run.usage)} ({token_split(run.usage)})"
        + (f" · Cost: est ${run.cost_usd:.4f}" if run.cost_usd is not None else ""),
        f"• Cleanup: {run.cleanup.value} · Archive: {_archive(run, archive_at, now)}",
    ]
    if spend is not None:
        lines.append(
            f"• Budget: run {spend_text(spend.run, spend.run_limits)} · "
            f"tree {spend_text(spend.tree, spend.tree_limits)}"
        )
    lines += attempt_lines(run, now=now)
    lines += _outcome(run)
    return "\n".join(lines)


def attempt_lines(run: RunRecord, *, now: float) -> list[str]:
    """``/subagents info``'s attempts of a run whose worker was lost (none for a run that
    ran in one attempt): each earlier attempt with when and why it ended, then the last."""
    ends = [e.partition("|") for e in run.attempt_ends]
    if not ends:
        return []
    lines = [f"• Attempts: {max(run.attempt, len(ends))}"]
    for number, (at, _, why) in enumerate(ends, start=1):
        try:
            stamp = when(float(at), now)
        except ValueError:
            stamp = "—"
        lines.append(f"  {number}. ended {stamp}: {one_line(why, 200)}")
    if run.attempt > len(ends):
        last = "waiting for a worker" if run.resuming else _state(run)
        lines.append(f"  {run.attempt}. {last}")
    return lines


def _runtime(run: RunRecord, now: float) -> str:
    if run.started_at is None:
        return "not started"
    end = run.ended_at or now
    return duration(end - run.started_at) + ("" if run.ended_at else " so far")


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


def render_log(run: RunRecord, *, view: LogView, tools: bool) -> str:
    """``/subagents log``: the newest messages of the run's log, one bullet each."""
    total = f"{view.total:,}"
    which = "with tool calls" if tools else "tool calls hidden; add `tools` to show them"
    head = (
        f"**Log of {run_title(run, noun='subagent', name='none')}** · {run_name(run)} — "
        f"last {len(view.messages)} of {total} messages ({which})"
    )
    if not view.messages:
        return head + "\n(nothing yet)"
    return "\n".join([head, *(f"• {log_line(m)}" for m in view.messages)])


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
        parts.append(f"{Icon.TOOL} {fn.get('name', '?')}({_args(fn.get('arguments', ''))})")
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
    "render_info",
    "render_list",
    "render_log",
    "timing",
]
