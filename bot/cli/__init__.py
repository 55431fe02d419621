"""The ``fanbot`` command line, and the composition roots it starts.

:mod:`~bot.cli.root` is the typer app (``console``, ``gateway``, ``worker``, ``doctor``)
with the operator groups added: ``fanbot subagents`` (:mod:`~bot.cli.subagents_ops`),
``fanbot schedules`` (:mod:`~bot.cli.schedules_ops`) and ``fanbot bench`` (loaded by name
from :mod:`bot.bench`). :mod:`~bot.cli.wiring` is the one place that knows which platform
adapters exist (the console builds its terminal channel itself); :mod:`~bot.cli.preflight`
and :mod:`~bot.cli.doctor` check a configuration, :mod:`~bot.cli.operator_deps` builds the
stores a one-shot command uses, and :mod:`~bot.cli.command_group` makes every typer group
alike.
"""

from bot.cli.root import app, main

__all__ = ["app", "main"]
