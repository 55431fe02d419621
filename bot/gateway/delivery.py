"""What egress does next with one outbox entry, decided without I/O.

The loop in :mod:`bot.gateway.egress` observes (one Redis :class:`EntryState` plus what its
own last send returned), asks :func:`decide`, performs the one action it gets, and
observes again, until an action settles the entry (the style of matrix-nio's ``Client``:
state in, actions out). Every branch here is table-tested without Redis or sleeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import GatewaySettings
from bot.store.outbox import EntryState

RETRY_AFTER_CEILING = 900.0  # a platform's Retry-After is honoured up to this
POLL_SECONDS = 0.25  # how often to look again while another gateway sends an entry
NOT_READY_SECONDS = 1.0  # how often to look again while the platform's adapter starts


@dataclass(frozen=True, kw_only=True)
class Policy:
    """Retry budget and backoff (from :class:`~bot.config.GatewaySettings`)."""

    attempts: int = 8
    backoff_base: float = 1.0
    backoff_cap: float = 60.0

    @classmethod
    def of(cls, settings: GatewaySettings) -> Policy:
        return cls(
            attempts=settings.delivery_attempts,
            backoff_base=settings.delivery_backoff_seconds,
            backoff_cap=settings.delivery_backoff_max_seconds,
        )


@dataclass(frozen=True, kw_only=True)
class Failure:
    """What the last send raised (a :class:`~bot.errors.DeliveryError`, as data)."""

    reason: str
    retry_after: float | None = None
    permanent: bool = False


@dataclass(frozen=True, kw_only=True)
class State:
    """Everything a decision needs.

    Args:
        consumer: This gateway's consumer name (the sending lock's token).
        platform: The entry's platform (``""`` when malformed).
        malformed: The entry could not be parsed.
        adapter: An adapter serves ``platform`` in this gateway.
        ready: That adapter has started (one still retrying its start is waited for, so
            an outage at start-up never spends the retry budget).
        snapshot: What Redis said just now.
        attempts: Sends this gateway tried for the entry so far.
        sent: Ids the last send returned, when it succeeded.
        failure: What the last send raised, not waited out yet.
        resumed: This gateway already worked on the entry before losing Redis.
    """

    consumer: str
    platform: str = ""
    malformed: bool = False
    adapter: bool = True
    ready: bool = True
    snapshot: EntryState
    attempts: int = 0
    sent: tuple[str, ...] | None = None
    failure: Failure | None = None
    resumed: bool = False


@dataclass(frozen=True)
class Ack:
    """Delivered already (by anyone): acknowledge the entry, post nothing."""


@dataclass(frozen=True)
class Settled:
    """Acknowledged already (delivered or dead-lettered elsewhere): nothing to do."""


@dataclass(frozen=True)
class Lock:
    """Nobody is sending it: take the sending lock."""


@dataclass(frozen=True)
class Wait:
    """Another live gateway is sending it: look again after ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class BreakLock:
    """The gateway holding the sending lock is dead: drop its lock."""

    holder: str


@dataclass(frozen=True)
class Send:
    """Post the parts from ``first_part`` on; ``in_doubt``: a part may be posted unrecorded."""

    first_part: int
    in_doubt: bool


@dataclass(frozen=True)
class Retry:
    """Wait ``after`` seconds, then send again."""

    after: float
    reason: str


@dataclass(frozen=True)
class MarkDelivered:
    """Record the delivery (with the parts' ids) and acknowledge the entry."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class DeadLetter:
    """Give up: move the entry to the dead-letter stream with ``reason``."""

    reason: str


Action = Ack | Settled | Lock | Wait | BreakLock | Send | Retry | MarkDelivered | DeadLetter
SETTLING = (Ack, Settled, MarkDelivered, DeadLetter)
"""Actions after which the entry needs nothing more from this gateway."""


def backoff(attempt: int, *, base: float, cap: float) -> float:
    """Exponential backoff: base, 2·base, 4·base … capped (attempt counts from 1)."""
    return float(min(cap, base * 2 ** (attempt - 1)))


def decide(state: State, policy: Policy) -> Action:
    """The next action for one entry (pure)."""
    snap = state.snapshot
    if snap.delivered:
        return Ack()
    if not snap.pending:
        return Settled()
    if snap.holder != state.consumer:
        if snap.holder is None:
            return Lock()
        return Wait(POLL_SECONDS) if snap.holder_alive else BreakLock(snap.holder)
    if state.malformed:
        return DeadLetter("malformed entry")
    if not state.adapter:
        return DeadLetter(f"no adapter for platform {state.platform!r}")
    if not state.ready:
        return Wait(NOT_READY_SECONDS)
    if state.sent is not None:
        return MarkDelivered(state.sent)
    if state.failure is not None:
        return _after_failure(state, state.failure, policy)
    in_doubt = state.attempts > 0 or snap.deliveries > 1 or state.resumed
    return Send(first_part=first_missing(snap.parts), in_doubt=in_doubt)


def _after_failure(state: State, failure: Failure, policy: Policy) -> Action:
    if failure.permanent or state.attempts >= policy.attempts:
        return DeadLetter(f"{failure.reason} (after {state.attempts} attempt(s))")
    wait = failure.retry_after
    if wait is None:
        wait = backoff(state.attempts, base=policy.backoff_base, cap=policy.backoff_cap)
    return Retry(after=min(wait, RETRY_AFTER_CEILING), reason=failure.reason)


def first_missing(parts: dict[int, str]) -> int:
    """The lowest part index not posted yet."""
    index = 0
    while index in parts:
        index += 1
    return index
