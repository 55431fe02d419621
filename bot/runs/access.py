"""Who may see and act on which runs: scope, id resolution and authorization.

Scope: the runs spawned from the current session (:func:`scope_runs`). A channel-level
Slack command (the ``/subagents`` slash command carries no thread) addresses every run of
that channel.

Ids (:func:`resolve_run`), tried in this order:

* ``last`` — the newest run in scope;
* ``3`` or ``#3`` — the run's number in its session: the one its status card, announce,
  ``/subagents list`` and every confirmation show (numbers count up from 1 per session and
  are never reused; a follow-up gets a new one);
* a child session key ``agent:<agentId>:subagent:<uuid>`` — its newest run (follow-ups
  share the key);
* a run-id prefix of at least :data:`MIN_PREFIX` characters (unique in scope).

An all-digit token that names no run number is also tried as a run-id prefix,
because run ids are hex and may start with digits; so is one with a leading zero
(``0042``), which no run number has.

Authorization (:func:`may_control`, see docs/architecture.md): ``list``/``info``/``log`` are open to
everyone the bot serves in the session (the gateway's access policy already decided that),
but ``log … tools`` (tool calls and their results: files read, pages fetched) only to an
admin or the run's requester (:func:`may_read_tools`).
``send``/``stop``/``stop all``/``/stop`` need an admin or the run's requester. Identities
are always ``platform:user_id``, and a run is only ever controlled from its own platform,
so ids that look alike on two platforms never match.

Everything here but :func:`scope_runs` is pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bot.deps import Deps
from bot.runs.naming import run_title
from bot.sessions import is_child_session_key, qualified_user
from bot.types import RunRecord, ThreadRef


@dataclass(frozen=True, kw_only=True)
class Actor:
    """Who is asking.

    Attributes:
        platform: The platform the command came from.
        user_id: The platform's user id.
        admins: Configured admins (``platform:user_id`` each).
    """

    platform: str
    user_id: str
    admins: Collection[str] = ()

    @property
    def qualified(self) -> str:
        return qualified_user(self.platform, self.user_id)

    @property
    def is_admin(self) -> bool:
        return bool(self.user_id) and self.qualified in self.admins

    @classmethod
    def from_qualified(cls, qualified: str, admins: Collection[str] = ()) -> Actor:
        """``slack:U1`` -> Actor(platform="slack", user_id="U1")."""
        platform, _, user_id = qualified.partition(":")
        return cls(platform=platform, user_id=user_id, admins=admins)


@dataclass(frozen=True, kw_only=True)
class Decision:
    allowed: bool
    reason: str = ""
    """Why not, as a short sentence for the user (empty when allowed)."""


def may_control(actor: Actor, run: RunRecord, *, verb: str = "stop") -> Decision:
    """Whether ``actor`` may ``verb`` (stop, send to) ``run``."""
    if run.thread.platform != actor.platform:
        return Decision(allowed=False, reason=f"That run belongs to {run.thread.platform}.")
    if actor.is_admin:
        return Decision(allowed=True)
    if actor.user_id and run.requester == actor.qualified:
        return Decision(allowed=True)
    return Decision(
        allowed=False,
        reason=f"Only an admin or the person who started it can {verb} this run.",
    )


def may_read_tools(actor: Actor, run: RunRecord) -> Decision:
    """Whether ``actor`` may read ``run``'s tool calls and results (``log … tools``)."""
    decision = may_control(actor, run)
    if decision.allowed:
        return decision
    name = run_title(run, noun="subagent", name="none")
    if run.thread.platform != actor.platform:
        return Decision(allowed=False, reason=f"{name} belongs to {run.thread.platform}.")
    return Decision(
        allowed=False,
        reason=f"Only an admin or the person who started {name} can see its tool calls; "
        f"`/subagents log {run.seq}` shows its conversation.",
    )


def partition(
    actor: Actor, runs: Sequence[RunRecord], *, verb: str = "stop"
) -> tuple[list[RunRecord], list[RunRecord]]:
    """Split ``runs`` into (allowed, refused) for ``actor``."""
    allowed: list[RunRecord] = []
    refused: list[RunRecord] = []
    for run in runs:
        (allowed if may_control(actor, run, verb=verb).allowed else refused).append(run)
    return allowed, refused


MIN_PREFIX = 4
MAX_TOKEN = 120
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """The run an id names, or why none does.

    Attributes:
        run: The run, or ``None``.
        error: A short markdown answer for the user when ``run`` is ``None``.
    """

    run: RunRecord | None = None
    error: str = ""


def channel_scope(thread: ThreadRef) -> bool:
    """Whether a command in ``thread`` addresses a whole channel's runs.

    Slack's ``/subagents`` slash command carries no thread (``thread is None``), while every
    Slack conversation with the bot lives in a thread; so there the channel's runs are meant.
    Elsewhere ``thread is None`` is a real session (Telegram General topic, Matrix timeline).
    """
    return thread.platform == "slack" and thread.thread is None


def valid_forms(runs: Sequence[RunRecord]) -> str:
    """One line listing what an ``<id>`` may be, for error answers."""
    numbers = sorted({r.seq for r in runs})
    if not numbers:
        example = "`#1`"
    elif len(numbers) == 1:
        example = f"`{run_title(numbers[0], noun='', name='none')}`"
    else:
        first, last = (run_title(n, noun="", name="none") for n in (numbers[0], numbers[-1]))
        example = f"`{first}`–`{last}`"
    return (
        f"Use a run's number ({example}, as its status card and announce show it), `last`, "
        f"a run-id prefix ({MIN_PREFIX}+ characters) or a child session key; "
        "see `/subagents list`."
    )


def resolve_run(token: str, runs: Sequence[RunRecord]) -> Resolution:
    """Find the run ``token`` names among ``runs`` (newest first)."""
    token = token.strip()
    shown = _shown(token)
    if not runs:
        return Resolution(error="There are no subagent runs here yet, so nothing matches.")
    if token.lower() == "last":
        return Resolution(run=runs[0])
    number = _number(token)
    if number is not None:
        found = _by_number(number, runs)
        if found.run is not None or token.startswith("#") or len(token) < MIN_PREFIX:
            return found
    if is_child_session_key(token):
        for run in runs:
            if run.child_session_key == token:
                return Resolution(run=run)
        return Resolution(error=f"No run here has session `{shown}`. " + valid_forms(runs))
    return _by_prefix(token.lower(), shown, runs)


def _by_number(number: int, runs: Sequence[RunRecord]) -> Resolution:
    hits = [r for r in runs if r.seq == number]
    # A channel-wide command sees several threads, each numbering its own runs.
    listed = ", ".join(f"`{r.run_id[:8]}`" for r in hits[:5])
    return _the_one(
        hits,
        none=f"There is no {run_title(number, noun='run', name='none')} here. " + valid_forms(runs),
        several=f"{run_title(number, noun='', name='none')} names {len(hits)} runs in this "
        f"channel ({listed}); use the run-id prefix, or ask in the run's own thread.",
    )


def _by_prefix(token: str, shown: str, runs: Sequence[RunRecord]) -> Resolution:
    if not token or not set(token) <= _HEX:
        return Resolution(error=f"`{shown}` is not a run id I know. " + valid_forms(runs))
    if len(token) < MIN_PREFIX:
        return Resolution(
            error=f"`{shown}` is too short for a run-id prefix (at least {MIN_PREFIX} "
            "characters). " + valid_forms(runs)
        )
    hits = [r for r in runs if r.run_id.startswith(token)]
    listed = ", ".join(f"{run_title(r, noun='', name='none')} `{r.run_id[:12]}`" for r in hits[:5])
    return _the_one(
        hits,
        none=f"No run here has an id starting `{shown}`. " + valid_forms(runs),
        several=f"`{shown}` matches {len(hits)} runs ({listed}); type more characters or use "
        "the run's number.",
    )


def _the_one(hits: Sequence[RunRecord], *, none: str, several: str) -> Resolution:
    """The run when ``hits`` holds exactly one; else the answer for none or several."""
    if len(hits) == 1:
        return Resolution(run=hits[0])
    return Resolution(error=several if hits else none)


def _number(token: str) -> int | None:
    digits = token[1:] if token.startswith("#") else token
    if digits.isdigit() and digits.isascii() and len(digits) <= 9:
        if len(digits) > 1 and digits.startswith("0") and not token.startswith("#"):
            return None  # a run-id prefix such as 0042ab…, not run number 42
        return int(digits)
    return None


def _shown(token: str) -> str:
    """The token as echoed back: one line, bounded, no backticks to break the code span."""
    clean = " ".join(token.split()).replace("`", "'")
    return clean if len(clean) <= MAX_TOKEN else clean[: MAX_TOKEN - 1] + "…"


def scope_runs(deps: Deps, *, session_key: str, thread: ThreadRef) -> list[RunRecord]:
    """Runs a command in ``thread`` may address, newest first.

    Normally the runs spawned from ``session_key``. A channel-level Slack message addresses
    every run of that channel: the channel session and each ``<session>:thread:<ts>``
    session under it.
    """
    if not channel_scope(thread):
        return deps.runs.session_runs(session_key)
    return [
        r
        for r in deps.runs.sessions_under(session_key)
        if r.thread.platform == thread.platform and r.thread.chat == thread.chat
    ]
