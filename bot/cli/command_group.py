"""How fanbot makes a command group (``fanbot``, ``fanbot subagents`` …): called bare it
shows its help, it offers no shell-completion options, and its help shows a flag as a flag
(``--quick``), never with a type (``--quick <bool>``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperGroup, TyperOption


def _flags_untyped(params: Iterable[object]) -> None:
    """Leave each flag's type column empty in the help (a flag takes no value)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""


class FlagsAsFlags(TyperGroup):
    """A group whose help, and its commands' help, show flags without a type."""

    def get_params(self, ctx: Any) -> Any:
        params = super().get_params(ctx)
        _flags_untyped(params)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _flags_untyped([*command.params, command.get_help_option(ctx)])
        return command


def command_group(*, name: str, help: str) -> typer.Typer:
    """A typer app for ``fanbot <name>``; ``help`` is its one-line summary."""
    return typer.Typer(
        name=name, help=help, cls=FlagsAsFlags, no_args_is_help=True, add_completion=False
    )
