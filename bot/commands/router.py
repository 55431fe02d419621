"""Answer commands. ``/help`` (its text is :mod:`bot.commands.registry`'s) lives here; the
run controls register their handlers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from bot.commands.parse import Command
from bot.commands.registry import COMMANDS, HELP_TEXT
from bot.deps import Deps
from bot.runs.access import Actor
from bot.types import Inbound, Outbound, OutboundKind, RunRecord


class Unread(Enum):
    """What a request was not given; a handler that needs it reads it."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


@dataclass(frozen=True, kw_only=True)
class CommandRequest:
    """A parsed command with where and by whom it was written.

    ``bound``: the thread-bound child whose thread the command was written in, as ingress
    found it (None: none), so the handlers do not read it again; :data:`UNREAD`: not looked up.
    """

    command: Command
    inbound: Inbound
    session_key: str
    deps: Deps
    bound: RunRecord | Unread | None = UNREAD

    @property
    def actor(self) -> Actor:
        """Who wrote the command (with the configured admins, for the access rules)."""
        return Actor(
            platform=self.inbound.thread.platform,
            user_id=self.inbound.sender.user_id,
            admins=self.deps.settings.admins,
        )


Handler = Callable[[CommandRequest], str]
"""Returns the answer (markdown), or "" when it queued its answer itself (:func:`early_reply`)."""


def reply_key(inbound: Inbound, kind: str = "cmd") -> str:
    """Idempotency key of the gateway's answer to ``inbound`` (egress posts a key once)."""
    return f"{kind}:{inbound.thread.platform}:{inbound.dedupe_id}"


def early_reply(inbound: Inbound, text: str) -> Outbound:
    """A command's answer as the gateway posts it, for a handler that must have it queued
    before it acts (a steer receipt's edits look the reply up). Such a handler returns ""."""
    ephemeral = inbound.thread.thread is None and not inbound.is_dm
    return Outbound(
        thread=inbound.thread,
        text=text,
        kind=OutboundKind.REPLY,
        idempotency_key=reply_key(inbound),
        ephemeral_to=inbound.sender.user_id if ephemeral else None,
    )


class CommandRouter:
    """Maps command names to handlers returning the reply text (markdown)."""

    def __init__(self) -> None:
        # /help and its aliases (Telegram sends /start when a person first opens the chat).
        helps = [c for c in COMMANDS if c.name == "help"]
        self._handlers: dict[str, Handler] = {
            name: lambda _: HELP_TEXT for c in helps for name in (c.name, *c.aliases)
        }

    def register(self, name: str, handler: Handler) -> None:
        """Route ``name`` and its registry aliases (``/reset`` for ``/new``) to ``handler``."""
        self._handlers[name] = handler
        for command in COMMANDS:
            if command.name == name:
                self._handlers.update((alias, handler) for alias in command.aliases)

    def handles(self, command: Command) -> bool:
        return command.name in self._handlers

    def dispatch(self, request: CommandRequest) -> str:
        handler = self._handlers.get(request.command.name)
        if handler is None:
            shown = request.command.name[:32].replace("`", "'")
            return f"Unknown command `/{shown}`. Try `/help`."
        return handler(request)
