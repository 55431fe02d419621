"""Chat commands: parsing (pure) and the router that answers them."""

from __future__ import annotations

from bot.commands.router import CommandRouter


def default_router() -> CommandRouter:
    """The router the gateway uses: ``/help`` plus every command module's handlers."""
    from bot.commands import subagents  # late: it imports the control plane, which imports us

    router = CommandRouter()
    subagents.register(router)
    return router
