"""Chat commands: parsing (pure), the router, and the handlers that call the run lifecycle."""

from __future__ import annotations

from bot.commands import subagents
from bot.commands.router import CommandRouter


def default_router() -> CommandRouter:
    """The router the gateway uses: ``/help`` plus every command module's handlers."""
    router = CommandRouter()
    subagents.register(router)
    return router
