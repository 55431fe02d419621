"""Answer commands. ``/help`` lives here; the run controls register their handlers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.commands.parse import Command
from bot.deps import Deps
from bot.types import Inbound

HELP_TEXT = (
    "*fanbot commands*\n"
    "• `/subagents list` — runs started in this thread\n"
    "• `/subagents info <id>` — details of one run\n"
    "• `/subagents log <id> [limit] [tools]` — its transcript\n"
    "• `/subagents send <id> <message>` — steer a run, or follow up a finished one\n"
    "• `/subagents stop <id|all>` — stop runs\n"
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


Handler = Callable[[CommandRequest], str]


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
