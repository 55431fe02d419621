"""``/status`` and ``/usage``: this thread's model, what it and the person spent today,
its runs and what the daily budgets leave (docs/chat-commands.md).

Spend comes from the daily budget counters (:mod:`bot.store.budgets`): a thread's counts
its main-agent turns and the subagent runs started from it, a person's everything they
asked for, per UTC day. A thread's total adds its days still kept (the counters expire
after ``subagents.retention_days``).
"""

from __future__ import annotations

import time

from bot.commands.context_command import agent_of
from bot.commands.router import CommandRequest
from bot.models.catalog import main_model, qualified
from bot.runs.access import scope_runs
from bot.runs.budget import Limits, daily_scopes, left, spend_text, usd_text, utc_day
from bot.runs.stop import running_turn
from bot.store.budgets import Spend, SpendScope
from bot.text import units
from bot.types import RunStatus

DAY = 86_400
MAX_TOTAL_DAYS = 400
"""``/usage`` adds at most this many days of a thread (the counters' retention caps it)."""


def _spent(spend: Spend, scope: SpendScope | None = None) -> str:
    """``3.1k tokens · $0.0012``, or ``3.1k of 10k tokens · …`` against the scope's
    limits (pure)."""
    limits = Limits(tokens=scope.max_tokens, usd=scope.max_usd) if scope else Limits()
    return spend_text(spend, limits)


def _today(req: CommandRequest) -> tuple[SpendScope, SpendScope, Spend, Spend]:
    """The thread's and the person's scopes of today, and their spend."""
    thread, user = daily_scopes(
        req.deps.settings,
        session_key=req.session_key,
        user=req.actor.qualified,
        day=utc_day(time.time()),
    )
    thread_spend, user_spend = req.deps.budgets.spent_each([thread, user])
    return thread, user, thread_spend, user_spend


def _left(scope: SpendScope, spend: Spend) -> str:
    rest = left(Limits(tokens=scope.max_tokens, usd=scope.max_usd), spend)
    parts = []
    if rest.tokens is not None:
        parts.append(f"{units.tokens(rest.tokens, trim=True)} of "
                     f"{units.tokens(scope.max_tokens or 0, trim=True)} tokens")  # fmt: skip
    if rest.usd is not None:
        parts.append(f"{usd_text(rest.usd)} of {usd_text(scope.max_usd or 0.0)}")
    return " and ".join(parts)


def handle_status(req: CommandRequest) -> str:
    """Model, today's spend, runs and answer in progress, budget left."""
    deps, session = req.deps, req.session_key
    settings = deps.settings
    own = deps.thread_models.get(session)
    model = qualified(settings, main_model(settings, agent_of(session) or None, own))
    whose = "this thread's own, `/model`" if own else "the agent's"
    thread, user, thread_spend, user_spend = _today(req)
    lines = [
        "*Status of this thread*",
        f"• Model: `{model}` ({whose})",
        f"• Today (UTC): this thread {_spent(thread_spend)}; you {_spent(user_spend)}",
    ]
    runs = scope_runs(deps, session_key=session, thread=req.inbound.thread)
    running = sum(r.status is RunStatus.RUNNING for r in runs)
    queued = sum(r.status is RunStatus.QUEUED for r in runs)
    if running or queued:
        lines.append(f"• Subagents: {running} running, {queued} queued (`/subagents list`)")
    else:
        lines.append("• Subagents: none running here")
    if running_turn(deps, session) is not None:
        lines.append("• An answer is in progress (`/stop` stops it)")
    budgets = [
        f"{name} {_left(scope, spend)}"
        for name, scope, spend in (("this thread", thread, thread_spend), ("you", user, user_spend))
        if scope.limited
    ]
    if budgets:
        lines.append("• Left today: " + "; ".join(budgets) + " (resets at 00:00 UTC)")
    else:
        lines.append("• No daily budget is set")
    return "\n".join(lines)


def handle_usage(req: CommandRequest) -> str:
    """Today's tokens and cost for the person and the thread, and the thread's total."""
    deps = req.deps
    thread, user, thread_spend, user_spend = _today(req)
    now = time.time()
    days = min(MAX_TOTAL_DAYS, max(1, -(-deps.budgets.ttl // DAY)))
    kept = [
        SpendScope(kind="thread", ident=req.session_key, day=utc_day(now - i * DAY))
        for i in range(days)
    ]
    spends = deps.budgets.spent_each(kept)
    total = Spend(tokens=sum(s.tokens for s in spends), usd=sum(s.usd for s in spends))
    return "\n".join(
        [
            "*Usage today (UTC)*",
            f"• You: {_spent(user_spend, user)}",
            f"• This thread: {_spent(thread_spend, thread)}",
            f"• This thread in all (the last {days} day(s) kept): {_spent(total)}",
        ]
    )
