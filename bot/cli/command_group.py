"""How fanbot makes a command group (``fanbot``, ``fanbot subagents`` …): called bare it
shows its help, and it offers no shell-completion options."""

from __future__ import annotations

import typer


def command_group(*, name: str, help: str) -> typer.Typer:
    """A typer app for ``fanbot <name>``; ``help`` is its one-line summary."""
    return typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False)
