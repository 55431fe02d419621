"""``/context`` (also ``/subagents context``): how much of the model's window this thread
takes, and the summary of its compacted turns (docs/models.md, "Threads that outgrow the
window").

The count is the one fanbot makes before a call (:mod:`bot.models.window`) over what the
next turn starts from: the summary and the recent history (the system prompt, the tools and
the new message come on top of it).
"""

from __future__ import annotations

import time

from bot.commands.router import CommandRequest
from bot.models import tokens
from bot.models.catalog import main_model, resolve
from bot.models.window import window_for, with_summary
from bot.text.sentences import clip_sentences
from bot.text.units import ago, utc_stamp

SHOWN_SUMMARY_CHARS = 1_200
"""``/context`` shows the summary clipped to this many characters (at a sentence end)."""


def agent_of(session_key: str) -> str:
    """The agent id of a requester session key (``agent:<id>:…``), else "" (pure)."""
    parts = session_key.split(":")
    return parts[1] if len(parts) > 2 and parts[0] == "agent" else ""


def handle_context(req: CommandRequest) -> str:
    """The thread's token count against the window, and its summary."""
    deps, session = req.deps, req.session_key
    settings = deps.settings
    model = main_model(settings, agent_of(session) or None, deps.thread_models.get(session))
    target = resolve(settings, model)
    history = deps.history.load(session)
    summary = deps.summaries.get(session)
    messages = with_summary([{"role": "system", "content": ""}, *history],
                            summary.text if summary is not None else "")  # fmt: skip
    win = window_for(settings, model)
    limit = win.room if win is not None else 1_000_000
    used = tokens.fit_count(messages, model=target.model, limit=limit)
    counted = bool(tokens.tokenizer_for(target.model)) and (
        tokens.estimate_messages(messages) >= limit * tokens.CLOSE_SHARE
    )
    how = "counted" if counted else "estimated"
    lines = [f"*Context of this thread* (model `{target.name}`)"]
    said = f"~{used:,} tokens {how} ({len(history)} recent message(s)"
    said += " and the summary)" if summary is not None else ")"
    if win is None:
        lines.append(
            f"• {said}; the model's window is unknown (set `context_window` for it: "
            "without it nothing is compacted before a call)."
        )
    else:
        share = 100 * used / max(1, win.limit)
        lines.append(
            f"• {said} of a {win.limit:,}-token window ({share:.0f}%; {win.reserve:,} kept "
            "for the answer). Older turns are summarized when a call would not fit."
        )
    if summary is None:
        lines.append("• No summary yet: nothing has been compacted in this thread.")
        return "\n".join(lines)
    age = ago(max(0.0, time.time() - summary.made_at))
    lines.append(
        f"• Summary made {utc_stamp(summary.made_at)} ({age}), standing for "
        f"{summary.covered:,} earlier message(s):"
    )
    shown = clip_sentences(summary.text, SHOWN_SUMMARY_CHARS)
    lines += [f"> {line}" if line.strip() else ">" for line in shown.splitlines()]
    return "\n".join(lines)
