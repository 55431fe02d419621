"""The :class:`~bot.deps.Deps` a one-shot operator command (``fanbot subagents``,
``fanbot schedules``) works with: settings loaded and Redis answering, or exit code 2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
import typer

from bot.cli.preflight import redis_unreachable
from bot.config import env_warnings, load_settings
from bot.deps import Deps
from bot.errors import ConfigError
from bot.redis.connect import connect


@contextmanager
def operator_deps(prog: str) -> Iterator[Deps]:
    """Yield the stores for one command, closed afterwards.

    Args:
        prog: The command's name (``fanbot subagents``) that starts each error line.

    Raises:
        typer.Exit: Code 2, after one line on stderr, when the settings are wrong or Redis
            does not answer PING.
    """
    try:
        settings = load_settings()
    except ConfigError as exc:
        typer.echo(f"{prog}: {exc}", err=True)
        raise typer.Exit(2) from None
    for line in env_warnings():
        typer.echo(f"{prog}: warning: {line}", err=True)
    deps = Deps.build(settings, client=connect(settings.redis_url, socket_timeout=5, retries=0))
    try:
        deps.connection.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        deps.close()
        typer.echo(f"{prog}: {redis_unreachable(settings.redis_url, exc)}", err=True)
        raise typer.Exit(2) from None
    try:
        yield deps
    finally:
        deps.close()
