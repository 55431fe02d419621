"""What ``fanbot worker`` makes of its arguments, parsed by the real command line (the
deploy files' tests check their ``fanbot worker …`` lines with it)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import typer

from bot.cli.root import app


def worker_options(argv: Sequence[str]) -> SimpleNamespace:
    """``fanbot worker <argv>``'s options by name (``metrics_port``, ``count`` …); a value
    it refuses raises click's usage error."""
    group = typer.main.get_command(app)
    with group.make_context("fanbot", ["worker"]) as ctx:
        command = group.get_command(ctx, "worker")  # type: ignore[attr-defined]
        with command.make_context("worker", list(argv), parent=ctx) as sub:
            return SimpleNamespace(**sub.params)
