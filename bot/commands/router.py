"""Answer commands. ``/help`` lives here; the run controls register their handlers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.commands.parse import Command
from bot.deps import Deps
from bot.runs.access import Actor
from bot.types import Inbound, Outbound, OutboundKind

HELP_TEXT = (
    "*fanbot commands*\n"
    "• `/subagents list` — runs started in this thread\n"
    "• `/subagents info <id>` — details of one run\n"
    "• `/subagents log <id> [limit] [tools]` — its conversation (`tools` adds tool calls)\n"
    "• `/subagents send <id> <message>` — steer a run, or follow up a finished one\n"
    "• `/subagents stop <id|all>` — stop runs\n"
    "• `/subagents spawn [--thread] [type] <task>` — start a subagent yourself "
    "(`--thread`: in a thread of its own; `/subagents close <id>` unbinds it)\n"
    "• `/subagents every <interval|cron> [type] <task>` — run it on a schedule "
    "(`/subagents schedules`, `/subagents unschedule <id>`)\n"
    "• `/stop` — stop the current answer and every run of this thread\n"
    "• `/help` — this list\n"
    "`<id>` is the run's number (`3` or `#3`: the one its status card and announce show), "
    "`last`, a run-id prefix or a session key."
)


@dataclass(frozen=True, kw_only=True)
class CommandRequest:
    """A parsed command with where and by whom it was written."""

    command: Command
    inbound: Inbound
    session_key: str
    deps: Deps

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
        # Telegram sends /start when a person first opens the chat: it gets the help.
        self._handlers: dict[str, Handler] = {
            "help": lambda _: HELP_TEXT,
            "start": lambda _: HELP_TEXT,
        }

    def register(self, name: str, handler: Handler) -> None:
        self._handlers[name] = handler

    def handles(self, command: Command) -> bool:
        return command.name in self._handlers

    def dispatch(self, request: CommandRequest) -> str:
        handler = self._handlers.get(request.command.name)
        if handler is None:
            shown = request.command.name[:32].replace("`", "'")
            return f"Unknown command `/{shown}`. Try `/help`."
        return handler(request)
