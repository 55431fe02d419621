"""Spend limits of runs, run trees, threads and users: resolve them, guard each model call.

A run's limit is the least of its spawn's ``maxTokens`` / ``maxCostUsd``, its type's
``max_tokens`` / ``max_cost_usd`` and ``budgets.run_*``; a child's is also clamped to what
its parent and its tree have left when it is spawned. A tree's (``budgets.tree_*``) covers a
root run and all its descendants; a thread's and a user's (``budgets.*_daily_*``) cover a UTC
day, main-agent turns included.

Before each model call :class:`BudgetGuard` reserves the call's estimate against every limit
that applies, all at once (:class:`bot.store.budgets.Budgets`), and settles to the usage the
model reports after it. The estimate is the request's estimated prompt tokens
(:func:`bot.models.tokens.estimate_messages`, with its safety margin: a reservation errs
high) plus the call's maximum output: ``openai.max_output_tokens``, else
:data:`DEFAULT_OUTPUT_ESTIMATE`. USD comes from the prices (:func:`estimate_cost`); a model
without a price spends no USD.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bot.config import BudgetSettings, Settings, SubagentType
from bot.deps import Deps
from bot.errors import BudgetExceeded, SpawnRejected
from bot.models import tokens
from bot.prices import estimate_cost
from bot.store.budgets import Reservation, Spend, SpendScope
from bot.text import units
from bot.types import RunRecord, Usage

DEFAULT_OUTPUT_ESTIMATE = 4_096
"""Output tokens a call is assumed to use when ``openai.max_output_tokens`` is not set."""
HELD_POLL_SECONDS = 0.25
_N = TypeVar("_N", int, float)

OWNERS = {
    "run": "the run's",
    "tree": "the run tree's",
    "thread": "this thread's daily",
    "user": "the requester's daily",
}


@dataclass(frozen=True, kw_only=True)
class Limits:
    """A token and a USD limit (None: none)."""

    tokens: int | None = None
    usd: float | None = None


def _least(*values: _N | None) -> _N | None:
    given = [v for v in values if v is not None]
    return min(given) if given else None


def run_limits(
    budgets: BudgetSettings, sub_type: SubagentType, *, tokens: int | None, usd: float | None
) -> Limits:
    """A run's own limits: the least of the spawn's, the type's and ``budgets.run_*``."""
    return Limits(
        tokens=_least(tokens, sub_type.max_tokens, budgets.run_tokens),
        usd=_least(usd, sub_type.max_cost_usd, budgets.run_usd),
    )


def left(limits: Limits, spend: Spend) -> Limits:
    """What ``limits`` leave after ``spend`` (never below zero)."""
    return Limits(
        tokens=None if limits.tokens is None else max(0, limits.tokens - spend.tokens),
        usd=None if limits.usd is None else max(0.0, limits.usd - spend.usd),
    )


def clamp(limits: Limits, *caps: Limits) -> Limits:
    """``limits`` no higher than any of ``caps``."""
    return Limits(
        tokens=_least(limits.tokens, *(c.tokens for c in caps)),
        usd=_least(limits.usd, *(c.usd for c in caps)),
    )


def utc_day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def daily_scopes(settings: Settings, *, session_key: str, user: str, day: str) -> list[SpendScope]:
    b = settings.budgets
    return [
        SpendScope(
            kind="thread",
            ident=session_key,
            day=day,
            max_tokens=b.thread_daily_tokens,
            max_usd=b.thread_daily_usd,
        ),
        SpendScope(
            kind="user",
            ident=user,
            day=day,
            max_tokens=b.user_daily_tokens,
            max_usd=b.user_daily_usd,
        ),
    ]


def run_scopes(settings: Settings, record: RunRecord, day: str) -> list[SpendScope]:
    """The scopes a run's model call counts toward: the run, its tree, thread and user."""
    b = settings.budgets
    root = record.root_run_id or record.run_id
    return [
        SpendScope(
            kind="run",
            ident=record.run_id,
            max_tokens=record.max_tokens,
            max_usd=record.max_cost_usd,
        ),
        SpendScope(kind="tree", ident=root, max_tokens=b.tree_tokens, max_usd=b.tree_usd),
        *daily_scopes(settings, session_key=record.session_key, user=record.requester, day=day),
    ]


def estimate(messages: Sequence[Any], tools: Sequence[Any], max_output: int | None) -> Usage:
    """A call's estimated use: its request's estimated prompt tokens, plus its output cap."""
    prompt = tokens.estimate_messages(messages, tools)
    return Usage(
        prompt_tokens=math.ceil(prompt * tokens.SAFETY_MARGIN),
        completion_tokens=max_output or DEFAULT_OUTPUT_ESTIMATE,
    )


def usd_of(settings: Settings, model: str, usage: Usage) -> float:
    return estimate_cost(settings, model, usage) or 0.0


def usd_text(usd: float) -> str:
    return f"${usd:.2f}" if usd >= 0.1 else f"${usd:.4f}"


def amount(unit: str, value: float) -> str:
    return usd_text(value) if unit == "usd" else f"{units.tokens(int(value), trim=True)} tokens"


def _of(scope: SpendScope, unit: str) -> float:
    limit = scope.max_usd if unit == "usd" else scope.max_tokens
    return float(limit or 0)


def _value(spend: Spend, unit: str) -> float:
    return spend.usd if unit == "usd" else float(spend.tokens)


def exhausted_text(scope: SpendScope, spend: Spend, unit: str, *, person: bool = False) -> str:
    """Why a call may not happen, naming the limit and the spend (pure); ``person``: said
    to the requester rather than written in a run's notes."""
    used, limit = _value(spend, unit), _of(scope, unit)
    if scope.kind not in ("thread", "user"):
        return (
            f"budget: {OWNERS[scope.kind]} limit of {amount(unit, limit)} is used up "
            f"({amount(unit, used)} spent)"
        )
    bare = usd_text(used) if unit == "usd" else units.tokens(int(used), trim=True)
    who = "This thread has used its"
    if scope.kind == "user":
        who = "You have used your" if person else "The requester has used their"
    end = "." if person else ""  # a run's notes go on after it
    return f"{who} daily budget ({bare} of {amount(unit, limit)}); it resets at 00:00 UTC{end}"


def warning_text(scope: SpendScope, spend: Spend, unit: str) -> str:
    """The note a nearly spent limit adds to the next model call (pure)."""
    share = int(100 * _value(spend, unit) / _of(scope, unit))
    return f"budget: {share} % of {OWNERS[scope.kind]} {amount(unit, _of(scope, unit))} used; finish up"


def crossed(
    scopes: Sequence[SpendScope], spent: Sequence[Spend], fraction: float
) -> list[tuple[float, SpendScope, str]]:
    """``(share, scope, unit)`` of each limit at or past ``fraction`` of it (pure)."""
    found = []
    for scope, spend in zip(scopes, spent, strict=True):
        for unit in ("tokens", "usd"):
            limit = _of(scope, unit)
            if limit > 0 and _value(spend, unit) >= fraction * limit:
                found.append((_value(spend, unit) / limit, scope, unit))
    return sorted(found, key=lambda f: -f[0])


@dataclass(kw_only=True)
class BudgetGuard:
    """A :class:`~bot.steps.CallBudget` over Redis: reserve, warn once per limit, settle.

    Attributes:
        deps: Stores and settings.
        scopes_for: The scopes of a call made on a given UTC day.
        wait: A refusal caused only by other calls in flight waits up to this long for them
            to settle (calling ``checkpoint`` meanwhile) before it counts as spent.
        checkpoint: Raises to end the wait (stop flag, deadline).
        person: Refusals are said to the requester (a turn), not written in run notes.
    """

    deps: Deps
    scopes_for: Callable[[str], Sequence[SpendScope]]
    wait: float = 60.0
    checkpoint: Callable[[], None] = lambda: None
    person: bool = False
    _held: Reservation | None = field(default=None, repr=False)
    _warned: set[tuple[str, str]] = field(default_factory=set, repr=False)

    def before_call(
        self, *, model: str, messages: Sequence[Any], tools: Sequence[Any]
    ) -> str | None:
        s = self.deps.settings
        scopes = list(self.scopes_for(utc_day(time.time())))
        if not any(scope.limited for scope in scopes):  # nothing to enforce: count it after
            self._held = Reservation(hold_id="", scopes=tuple(scopes), ok=True)
            return None
        guess = estimate(messages, tools, s.openai.max_output_tokens)
        give_up = time.monotonic() + self.wait
        while True:
            held = self.deps.budgets.reserve(
                scopes, tokens=guess.total, usd=usd_of(s, model, guess), hold_seconds=self._hold()
            )
            if held.ok:
                break
            if not held.held_only or time.monotonic() >= give_up:
                raise self._exceeded(held)
            self.checkpoint()
            time.sleep(HELD_POLL_SECONDS)
        self._held = held
        return self._warning(held)

    def after_call(self, *, model: str, usage: Usage | None) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        used = usage or Usage()
        self.deps.budgets.settle(
            held, tokens=used.total, usd=usd_of(self.deps.settings, model, used)
        )

    def _hold(self) -> float:
        o = self.deps.settings.openai
        return o.request_timeout * (o.max_retries + 1) + 60

    def _exceeded(self, held: Reservation) -> BudgetExceeded:
        assert held.refused is not None
        text = exhausted_text(held.refused, held.refused_spend, held.unit, person=self.person)
        if held.held_only:
            text += " (counting the calls still running)"
        return BudgetExceeded(text, kind=held.refused.kind)

    def _warning(self, held: Reservation) -> str | None:
        fraction = self.deps.settings.budgets.warn_fraction
        fresh = [
            c
            for c in crossed(held.scopes, held.spent, fraction)
            if (c[1].kind, c[2]) not in self._warned
        ]
        self._warned |= {(scope.kind, unit) for _, scope, unit in fresh}
        if not fresh:
            return None
        _, scope, unit = fresh[0]
        return warning_text(scope, held.spent[list(held.scopes).index(scope)], unit)


def run_guard(deps: Deps, record: RunRecord, checkpoint: Callable[[], None]) -> BudgetGuard:
    """The guard of a subagent run's model calls."""
    return BudgetGuard(
        deps=deps,
        scopes_for=lambda day: run_scopes(deps.settings, record, day),
        checkpoint=checkpoint,
    )


def turn_guard(
    deps: Deps, *, session_key: str, user: str, checkpoint: Callable[[], None]
) -> BudgetGuard:
    """The guard of a main-agent turn's model calls (its thread's and user's day)."""
    return BudgetGuard(
        deps=deps,
        scopes_for=lambda day: daily_scopes(
            deps.settings, session_key=session_key, user=user, day=day
        ),
        checkpoint=checkpoint,
        person=True,
    )


def over_daily(deps: Deps, *, session_key: str, user: str, person: bool = True) -> str | None:
    """What to tell someone asking for work when their thread or they spent the day's
    budget (None: there is budget left)."""
    scopes = daily_scopes(
        deps.settings, session_key=session_key, user=user, day=utc_day(time.time())
    )
    for scope in scopes:
        if not scope.limited:
            continue
        spend = deps.budgets.spent(scope)
        for unit in ("tokens", "usd"):
            limit = _of(scope, unit)
            if limit > 0 and _value(spend, unit) >= limit:
                return exhausted_text(scope, spend, unit, person=person)
    return None


@dataclass(frozen=True, kw_only=True)
class SpawnBudget:
    """What a spawn asks of the budgets: who spawns, and the limits it requested."""

    session_key: str
    requester: str
    parent_run_id: str = ""
    root_run_id: str = ""
    tokens: int | None = None
    usd: float | None = None


def spawn_limits(deps: Deps, sub_type: SubagentType, ask: SpawnBudget) -> Limits:
    """The limits a new run gets; :class:`SpawnRejected` when its thread, requester, parent
    or tree has nothing left."""
    refusal = over_daily(deps, session_key=ask.session_key, user=ask.requester, person=False)
    if refusal:
        raise SpawnRejected(f"{refusal}; no subagent was started")
    limits = run_limits(deps.settings.budgets, sub_type, tokens=ask.tokens, usd=ask.usd)
    if not ask.parent_run_id:
        return limits
    b = deps.settings.budgets
    root = ask.root_run_id or ask.parent_run_id
    tree = deps.budgets.spent(SpendScope(kind="tree", ident=root))
    caps = [left(Limits(tokens=b.tree_tokens, usd=b.tree_usd), tree)]
    parent = deps.runs.get(ask.parent_run_id)
    if parent is not None:
        spent = deps.budgets.spent(SpendScope(kind="run", ident=parent.run_id))
        caps.append(left(Limits(tokens=parent.max_tokens, usd=parent.max_cost_usd), spent))
    limits = clamp(limits, *caps)
    if limits.tokens == 0 or limits.usd == 0:
        raise SpawnRejected(
            "the budget of this run or its tree is used up; no subagent was started"
        )
    return limits


@dataclass(frozen=True, kw_only=True)
class RunSpend:
    """A run's and its tree's spend, with their limits (for ``/subagents info``)."""

    run: Spend
    tree: Spend
    run_limits: Limits
    tree_limits: Limits


def run_spend(deps: Deps, record: RunRecord) -> RunSpend:
    b = deps.settings.budgets
    root = record.root_run_id or record.run_id
    return RunSpend(
        run=deps.budgets.spent(SpendScope(kind="run", ident=record.run_id)),
        tree=deps.budgets.spent(SpendScope(kind="tree", ident=root)),
        run_limits=Limits(tokens=record.max_tokens, usd=record.max_cost_usd),
        tree_limits=Limits(tokens=b.tree_tokens, usd=b.tree_usd),
    )


def spend_text(spend: Spend, limits: Limits) -> str:
    """``3.1k of 10k tokens · $0.0012`` (pure)."""
    tokens = units.tokens(spend.tokens, trim=True)
    text = f"{tokens} of {amount('tokens', limits.tokens)}" if limits.tokens else f"{tokens} tokens"
    usd = usd_text(spend.usd)
    text += (
        f" · {usd} of {usd_text(limits.usd)}" if limits.usd else (f" · {usd}" if spend.usd else "")
    )
    return text
