"""The pure guards in front of ingress's handlers (state in, decision out; table-tested).

:func:`admit`: what to do with one delivery of an event, given its dedupe claim;
:func:`decide`: the middleware's rules (own and bots' messages, edits, empty messages,
the access policy (:func:`permitted`), mention gating); :func:`cap_inbound`: an oversized
message cut to the limit; :func:`message_limits` and :func:`slow_down`: the messages-per-
minute limits (docs/architecture.md "Bounded use"). :mod:`bot.gateway.ingress` applies them.
"""

from __future__ import annotations

import dataclasses
import enum

from bot.config import PlatformAccess, Settings
from bot.sessions import qualified_user
from bot.store.dedupe import Claimed
from bot.store.usage import WINDOW_SECONDS
from bot.text.clip import clip
from bot.types import Inbound

CLAIM_SECONDS = 30
"""How long a delivery that died before enqueueing holds up the redeliveries of its event."""


class Admit(enum.StrEnum):
    """What to do with one delivery of an inbound event, given its claim."""

    HANDLE = "handle"
    DUPLICATE = "duplicate"
    BUSY = "busy"
    TAKE_OVER = "take over"


def admit(claimed: Claimed, *, other_job_exists: bool, hold_seconds: float) -> Admit:
    """The dedupe decision (pure; see :mod:`bot.store.dedupe`)."""
    if claimed.mine:
        return Admit.HANDLE
    if claimed.done or other_job_exists:
        return Admit.DUPLICATE  # handled, or its delivery died after enqueueing
    if claimed.age < hold_seconds:
        return Admit.BUSY
    return Admit.TAKE_OVER  # that delivery died before enqueueing


class Verdict(enum.StrEnum):
    """What the middleware decided for one inbound message."""

    ACCEPT = "accept"
    SELF = "ignored: own message"
    BOT = "ignored: another bot"
    EDIT = "ignored: edit"
    EMPTY = "ignored: empty"
    DENIED = "ignored: not allowed"
    UNADDRESSED = "ignored: not addressed to the bot"
    LIMITED = "ignored: over the message limit"


def platform_access(settings: Settings, platform: str) -> PlatformAccess:
    access = getattr(settings, platform, None)
    return access if isinstance(access, PlatformAccess) else PlatformAccess()


def decide(
    inbound: Inbound, *, settings: Settings, access: PlatformAccess, session_exists: bool
) -> Verdict:
    """The middleware's rules, in order (pure)."""
    if inbound.sender.is_self:
        return Verdict.SELF
    if inbound.sender.is_bot:
        return Verdict.BOT
    if inbound.is_edit:
        return Verdict.EDIT
    if not inbound.text.strip() and not inbound.attachments:
        return Verdict.EMPTY
    if not permitted(inbound, access=access):
        return Verdict.DENIED
    continues = session_counts(inbound, settings=settings, access=access) and session_exists
    if not (addressed(inbound, settings=settings) or continues):
        return Verdict.UNADDRESSED
    return Verdict.ACCEPT


def permitted(inbound: Inbound, *, access: PlatformAccess) -> bool:
    """The access policy (pure): the sender and the chat are allowed. Everything a person
    sends passes it first, approval decisions included."""
    if access.allow_users and inbound.sender.user_id not in access.allow_users:
        return False
    return not (access.allow_chats and inbound.thread.chat not in access.allow_chats)


def message_limits(
    inbound: Inbound, *, session_key: str, settings: Settings
) -> tuple[tuple[str, int], ...]:
    """The messages-per-minute counters ``inbound`` counts against, as ``(name, limit)``
    (pure): its sender's and its thread's (the requester session: a DM is its own). None
    for an admin, and none that is turned off (0)."""
    sender = inbound.sender
    if settings.is_admin(inbound.thread.platform, sender.user_id):
        return ()
    limits = settings.limits
    counters = (
        (f"user|{qualified_user(inbound.thread.platform, sender.user_id)}",
         limits.messages_per_minute_per_user),
        (f"thread|{session_key}", limits.messages_per_minute_per_thread),
    )  # fmt: skip
    return tuple(c for c in counters if c[1] > 0)


def window(now: float) -> int:
    """The number of the one-minute window ``now`` falls in (pure)."""
    return int(now // WINDOW_SECONDS)


def slow_down(now: float, *, thread: bool) -> str:
    """The one answer to the first message over a limit in a window (pure): when the
    next window starts."""
    wait = max(1, int((window(now) + 1) * WINDOW_SECONDS - now + 0.999))
    busy = "this thread has reached its messages per minute; " if thread else ""
    return f"⏳ Slow down: {busy}you can send again in {wait} s."


def addressed(inbound: Inbound, *, settings: Settings) -> bool:
    """The message is for the bot whatever its thread (pure): a mention, a DM, or no
    mention required."""
    return inbound.mentioned or inbound.is_dm or not settings.gateway.require_mention


def session_counts(inbound: Inbound, *, settings: Settings, access: PlatformAccess) -> bool:
    """Whether :func:`decide`'s verdict on ``inbound`` depends on its session having
    history (pure): a message not addressed to the bot, in a thread, where threads the
    bot takes part in continue without a mention. Otherwise nobody needs to look."""
    return (
        not addressed(inbound, settings=settings)
        and access.continue_threads
        and inbound.thread.thread is not None
    )


def cap_inbound(inbound: Inbound, limit: int) -> tuple[Inbound, int]:
    """``inbound`` with its text cut to ``limit`` characters plus a note (pure).

    Returns:
        The message to handle and how many characters were cut (0: unchanged).
    """
    cut = len(inbound.text) - limit
    if cut <= 0:
        return inbound, 0
    return dataclasses.replace(inbound, text=clip(inbound.text, limit)), cut
