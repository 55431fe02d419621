"""The announce: how a finished run reports back into its thread (pure rendering).

Template (stable; tests and users rely on it)::

    ✅ Subagent #2 "Django research" (researcher) finished
    Status: success
    Result: <final answer, or "(not available)">
    Notes: <errors, partial progress, warnings — omitted when empty>
    runtime 1m02s · tokens 3.1k (in 2.4k / out 0.7k) · est $0.0012 · session … · id … · transcript …

The status line comes from the runtime outcome, never from model text.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.config import Price
from bot.types import RunRecord, RunStatus, Usage

ANNOUNCE_SKIP = "ANNOUNCE_SKIP"

_HEADLINE = {
    RunStatus.SUCCESS: ("✅", "finished"),
    RunStatus.ERROR: ("❌", "failed"),
    RunStatus.TIMEOUT: ("⏱️", "timed out"),
    RunStatus.STOPPED: ("⏹️", "was stopped"),
    RunStatus.UNKNOWN: ("❓", "ended unexpectedly"),
}


def format_duration(seconds: float) -> str:
    """``0.4`` -> ``0s``, ``62`` -> ``1m02s``, ``3725`` -> ``1h02m``."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_tokens(n: int) -> str:
    """``950`` -> ``950``, ``3100`` -> ``3.1k``, ``2_500_000`` -> ``2.5M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def estimate_cost(model: str, usage: Usage, prices: Mapping[str, Price]) -> float | None:
    """USD for ``usage`` at the model's per-1M-token prices; None if no price is known."""
    price = prices.get(model)
    if price is None:
        return None
    return (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / 1e6


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n… (truncated, {len(text) - limit} more characters)"


def stats_line(record: RunRecord, *, ended_at: float, transcript_ref: str) -> str:
    started = record.started_at or record.created_at
    usage = record.usage
    parts = [
        f"runtime {format_duration(ended_at - started)}",
        f"tokens {format_tokens(usage.total)} (in {format_tokens(usage.prompt_tokens)}"
        f" / out {format_tokens(usage.completion_tokens)})",
    ]
    if record.cost_usd is not None:
        parts.append(f"est ${record.cost_usd:.4f}")
    parts += [
        f"session {record.child_session_key}",
        f"id {record.run_id[:8]}",
        f"transcript {transcript_ref}",
    ]
    return " · ".join(parts)


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
    icon, verb = _HEADLINE.get(status, ("•", "ended"))
    name = record.label or _short(record.task, 60)
    lines = [
        f'{icon} Subagent #{record.seq} "{_one_line(name)}" ({record.subagent_type}) {verb}',
        f"Status: {status.value}",
    ]
    body = truncate(result.strip(), max_result_chars) if result.strip() else "(not available)"
    lines.append(f"Result:\n{body}" if "\n" in body else f"Result: {body}")
    if notes.strip():
        lines.append(f"Notes: {notes.strip()}")
    lines.append(stats_line(record, ended_at=ended_at, transcript_ref=transcript_ref))
    return "\n".join(lines)


def history_note(record: RunRecord, *, status: RunStatus, result: str) -> str:
    """What the main agent sees of the result in its next turn."""
    name = record.label or _short(record.task, 60)
    return (
        f'[Subagent #{record.seq} "{_one_line(name)}" ({record.subagent_type}) ended: '
        f"{status.value}; run {record.run_id[:8]}]\n{result.strip() or '(no result)'}"
    )


def _short(text: str, limit: int) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace('"', "'")
