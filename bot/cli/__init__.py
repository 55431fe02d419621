"""The ``fanbot`` command line, and the composition roots it starts.

:mod:`~bot.cli.root` is the typer app (``console``, ``gateway``, ``worker``, ``doctor``)
with the operator groups added: ``fanbot subagents`` (:mod:`~bot.cli.subagents_ops`),
``fanbot schedules`` (:mod:`~bot.cli.schedules_ops`) and ``fanbot bench`` (loaded by name
from :mod:`bot.bench`). :mod:`~bot.cli.wiring` is the one place that knows which platform
adapters exist (the console builds its terminal channel itself); :mod:`~bot.cli.preflight`
and :mod:`~bot.cli.doctor` check a configuration, :mod:`~bot.cli.operator_deps` builds the
stores a one-shot command uses, and :mod:`~bot.cli.command_group` makes every typer group
alike.

Importing this package imports nothing else: the ``fanbot`` console script imports it, and
Python runs that script again in every process it *spawns* (a worker's parser helpers,
:mod:`bot.supervise.procpool`), which must stay small. :func:`main` and ``app`` load
:mod:`~bot.cli.root` when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.cli.root import app

__all__ = ["app", "main"]


def main() -> None:
    """``fanbot``: run the command line."""
    from bot.cli.root import main as run

    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from bot.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
