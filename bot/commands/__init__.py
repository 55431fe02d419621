"""Chat commands: the registry (every command once, :mod:`~bot.commands.registry`), parsing
(pure, :mod:`~bot.commands.parse`), the router and ``/help``
(:mod:`~bot.commands.router`), and the handlers that call the run lifecycle:
:mod:`~bot.commands.subagents` (``list|info|log|send|stop`` and ``/stop``),
:mod:`~bot.commands.spawn_command`, :mod:`~bot.commands.schedule_chat`, with their answers
rendered by :mod:`~bot.commands.answers`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.commands.router import CommandRouter


def default_router() -> CommandRouter:
    """The router the gateway uses: ``/help`` plus every command module's handlers."""
    # Imported here, not at the top: adapters read bot.commands.registry, and importing
    # this package must not load the run lifecycle (and its Redis stores) into them.
    from bot.commands import subagents
    from bot.commands.router import CommandRouter

    router = CommandRouter()
    subagents.register(router)
    return router
