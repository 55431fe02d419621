"""Who may do what to a run (pure; DESIGN §5).

``list``/``info``/``log`` are open to everyone the bot serves in the session (the gateway's
access policy already decided that). ``send``/``stop``/``stop all``/``/stop`` need an admin
or the run's requester. Identities are always ``platform:user_id``, and a run is only ever
controlled from its own platform, so ids that look alike on two platforms never match.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bot.sessions import qualified_user
from bot.types import RunRecord


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


def partition(
    actor: Actor, runs: Sequence[RunRecord], *, verb: str = "stop"
) -> tuple[list[RunRecord], list[RunRecord]]:
    """Split ``runs`` into (allowed, refused) for ``actor``."""
    allowed: list[RunRecord] = []
    refused: list[RunRecord] = []
    for run in runs:
        (allowed if may_control(actor, run, verb=verb).allowed else refused).append(run)
    return allowed, refused
