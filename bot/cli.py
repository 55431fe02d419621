"""The ``fanbot`` command line (typer). A configuration mistake exits 2 with a clear message."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from bot.config import Settings, load_settings
from bot.errors import ConfigError, FanbotError

app = typer.Typer(
    name="fanbot",
    help="A thread-native chat bot that fans out subagents on RQ workers.",
    no_args_is_help=True,
    add_completion=False,
)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        typer.echo(f"fanbot: {exc}", err=True)
        raise typer.Exit(2) from None


def _log_to(settings: Settings, path: Path | None) -> None:
    from bot import failpoints
    from bot.logs import configure

    configure(settings, path)
    try:
        failpoints.load()
    except ValueError as exc:
        typer.echo(f"fanbot: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def console(
    workers: Annotated[int, typer.Option(help="Worker processes to start.", min=1, max=64)] = 4,
    external_redis: Annotated[
        bool, typer.Option(help="Use FANBOT_REDIS_URL instead of a private Redis.")
    ] = False,
) -> None:
    """Run everything locally: private Redis, workers, and a terminal chat."""
    from bot.console_app import run_console

    settings = _settings()
    _log_to(settings, settings.state_dir / "console.log")
    # A shell may start us with SIGINT ignored; Ctrl-C must still shut everything down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = asyncio.run(run_console(settings, workers=workers, external_redis=external_redis))
    except KeyboardInterrupt:
        code = 130
    except FanbotError as exc:
        typer.echo(f"fanbot console: {exc}", err=True)
        code = 2 if isinstance(exc, ConfigError) else 1
    raise typer.Exit(code)


@app.command()
def gateway() -> None:
    """Serve every platform whose credentials are configured (no LLM work here)."""
    from bot.gateway.runtime import Gateway
    from bot.wiring import build_adapters

    settings = _settings()
    _log_to(settings, None)
    adapters = build_adapters(settings)
    if not adapters:
        typer.echo(
            "fanbot gateway: no platform configured (set e.g. FANBOT_SLACK__BOT_TOKEN, "
            "FANBOT_TELEGRAM__BOT_TOKEN or FANBOT_MATRIX__HOMESERVER/USER_ID/PASSWORD); "
            "try `fanbot console` for a local chat",
            err=True,
        )
        raise typer.Exit(2)

    async def serve() -> None:
        gw = Gateway(settings=settings, adapters=adapters)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await gw.start()
        try:
            await stop.wait()
        finally:
            await gw.stop()

    asyncio.run(serve())


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(ctx: typer.Context) -> None:
    """Run RQ workers on the turns and subagents queues (see `fanbot worker --help`)."""
    launcher = importlib.import_module("workers.launcher")
    try:
        raise typer.Exit(launcher.main(ctx.args))
    except ConfigError as exc:
        typer.echo(f"fanbot worker: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def doctor(
    replay_dead_letters: Annotated[
        bool,
        typer.Option(
            "--replay-dead-letters",
            help="Put every dead-lettered message back into the outbox (the gateway redelivers).",
        ),
    ] = False,
) -> None:
    """Check configuration, Redis, the model endpoint and each configured platform."""
    from bot.doctor import replay, run_checks

    settings = _settings()
    if replay_dead_letters:
        code, text = replay(settings)
        typer.echo(text, err=code != 0)
        raise typer.Exit(code)
    checks = run_checks(settings)
    for check in checks:
        typer.echo(f"{'ok ' if check.ok else 'BAD'}  {check.name}: {check.detail}")
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)


app.add_typer(importlib.import_module("bot.ops_cli").app, name="subagents")
app.add_typer(importlib.import_module("bot.bench.cli").app, name="bench")


def main() -> None:
    with contextlib.suppress(BrokenPipeError):
        app()
    sys.stdout.flush()
