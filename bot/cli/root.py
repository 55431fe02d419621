"""The ``fanbot`` command line (typer).

A start-up mistake (configuration, Redis unreachable) is one line on stderr and exit code 2,
never a traceback: ``fanbot <command>: <what is wrong, naming the setting>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import importlib.metadata
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer

from bot.cli.command_group import FlagsAsFlags, command_group
from bot.config import Settings, env_warnings, load_settings
from bot.errors import ConfigError, FanbotError, RedisUnavailable
from bot.supervise.signals import stop_on_signal

if TYPE_CHECKING:
    from bot.ports import ChannelAdapter

app = command_group(
    name="fanbot", help="A thread-native chat bot that fans out subagents on RQ workers."
)

STARTUP_ERRORS = (ConfigError, RedisUnavailable)
"""Mistakes an operator fixes before starting again: one line, exit code 2."""


def _fail(command: str, exc: BaseException | str) -> NoReturn:
    typer.echo(f"fanbot {command}: {' '.join(str(exc).split())}", err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def startup(command: str) -> Iterator[None]:
    """Turn a start-up error raised inside into its one line and exit code 2."""
    try:
        yield
    except STARTUP_ERRORS as exc:
        _fail(command, exc)


def _settings(command: str) -> Settings:
    with startup(command):
        settings = load_settings()
    warn_unknown_env(command)
    return settings


def warn_unknown_env(command: str) -> None:
    """A line on stderr per ``FANBOT_*`` variable that sets nothing (a typo is never silent)."""
    for line in env_warnings():
        typer.echo(f"fanbot {command}: warning: {line}", err=True)


def _log_to(command: str, settings: Settings, path: Path | None) -> None:
    from bot.failpoints import Failpoints
    from bot.logs import configure

    configure(settings, path)
    try:
        Failpoints.from_env()  # a typo in FANBOT_FAILPOINTS fails here, at start-up
    except ValueError as exc:
        _fail(command, exc)


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("fanbot")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        typer.echo(f"fanbot {version}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """A thread-native chat bot that fans out subagents on RQ workers."""


@app.command()
def console(
    workers: Annotated[int, typer.Option(help="Worker processes to start.", min=1, max=64)] = 4,
    external_redis: Annotated[
        bool, typer.Option(help="Use FANBOT_REDIS_URL instead of a private Redis.")
    ] = False,
    reset: Annotated[
        bool,
        typer.Option(
            "--reset",
            help="Start afresh: empty the private Redis first (threads, runs, run numbers).",
        ),
    ] = False,
) -> None:
    """Run everything locally: private Redis, workers, and a terminal chat."""
    from bot.cli.preflight import require_redis, require_skills
    from bot.console.app import RESET_EXTERNAL, run_console
    from bot.hooks.resolve import check as check_hooks

    if reset and external_redis:
        typer.echo(RESET_EXTERNAL, err=True)
        raise typer.Exit(2)

    settings = _settings("console")
    with startup("console"):
        check_hooks(settings)  # its workers would refuse to start: say it here, once
    _log_to("console", settings, settings.state_dir / "console.log")
    with startup("console"):
        require_skills(settings)
    if external_redis:
        with startup("console"):
            require_redis(settings.redis_url)
    # A shell may start us with SIGINT ignored; Ctrl-C must still shut everything down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = asyncio.run(
            run_console(settings, workers=workers, external_redis=external_redis, reset=reset)
        )
    except KeyboardInterrupt:
        code = 130
    except STARTUP_ERRORS as exc:
        _fail("console", exc)
    except FanbotError as exc:
        typer.echo(f"fanbot console: {exc}", err=True)
        code = 1
    raise typer.Exit(code)


NO_PLATFORM = (
    "no platform configured (set e.g. FANBOT_SLACK__BOT_TOKEN, FANBOT_TELEGRAM__BOT_TOKEN or "
    "FANBOT_MATRIX__HOMESERVER/USER_ID/PASSWORD); try `fanbot console` for a local chat"
)


@app.command()
def gateway() -> None:
    """Serve every platform whose credentials are configured (no LLM work here)."""
    from bot.cli.preflight import require_skills
    from bot.cli.wiring import build_adapters
    from bot.redis.watch import wait_until_reachable

    settings = _settings("gateway")
    _log_to("gateway", settings, None)
    with startup("gateway"):
        require_skills(settings)
        adapters = build_adapters(settings)
        if not adapters:
            raise ConfigError(NO_PLATFORM)
        with stop_on_signal() as stopping:  # Redis not there yet: wait for it, a line a try
            if not wait_until_reachable(settings.redis_url, who="gateway", stop=stopping):
                return
        asyncio.run(_serve(settings, adapters))
    # Everything is closed. Without this the interpreter's teardown runs the cyclic
    # collector over every object of ~1,300 modules again and again: 1-2 s on an idle host,
    # seconds more on a busy one, after "stopped in" was logged (docs/operations.md).
    gc.freeze()


async def _serve(settings: Settings, adapters: list[ChannelAdapter]) -> None:
    """Run the gateway until SIGTERM/SIGINT."""
    import redis

    from bot.cli.preflight import redis_unreachable
    from bot.gateway.runtime import Gateway
    from bot.observe import tracing

    tracing.configure(settings, service="gateway")  # a no-op unless an OTLP endpoint is set
    gw = Gateway(settings=settings, adapters=adapters)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gw.start()
        await stop.wait()
    except redis.ConnectionError as exc:  # Redis went away between the check and the start
        raise RedisUnavailable(redis_unreachable(settings.redis_url, exc)) from None
    finally:
        await gw.stop()


@app.command()
def worker(
    count: Annotated[int, typer.Option(help="Worker processes.", min=1, max=256)] = 4,
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues to work on (default: turns,subagents)."),
    ] = None,
    pool: Annotated[
        Literal["fork", "threads"] | None,
        typer.Option(
            help="fork: a process per run; threads: runs share each worker process "
            "(default: FANBOT_WORKERS__POOL, else threads).",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="threads pool: runs at once per worker process (default: "
            "FANBOT_WORKERS__CONCURRENCY, else 32).",
            min=1,
        ),
    ] = None,
    max_runs: Annotated[
        int | None,
        typer.Option(help="threads pool: replace a worker process after this many runs.", min=1),
    ] = None,
    max_memory_mb: Annotated[
        int | None,
        typer.Option(
            help="threads pool: replace a worker process whose memory (USS) passes this.", min=1
        ),
    ] = None,
    metrics_port: Annotated[
        int,
        typer.Option(help="Serve /metrics, /healthz and /readyz on this port (0: off).", min=0),
    ] = 0,
    metrics_host: Annotated[str, typer.Option(help="The address to serve them on.")] = "127.0.0.1",
    no_maintenance: Annotated[
        bool,
        typer.Option(
            "--no-maintenance", help="No maintenance sweep (reaper, archiver) in this launcher."
        ),
    ] = False,
    single: Annotated[
        bool, typer.Option("--single", help="Run one worker in this process.")
    ] = False,
    burst: Annotated[bool, typer.Option("--burst", help="Exit when the queues are empty.")] = False,
    parent_pid: Annotated[int | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run RQ workers on the turns and subagents queues, plus the maintenance sweep.

    A worker that dies is restarted; SIGTERM lets running jobs finish.
    """
    # bot never imports workers (docs/architecture.md): the launcher is loaded by name.
    launcher = importlib.import_module("workers.launcher")
    warn_unknown_env("worker")
    named = {"queues": tuple(q for q in queues.split(",") if q)} if queues is not None else {}
    options = launcher.LaunchOptions(
        **named, count=count, pool=pool,
        concurrency=concurrency, max_runs=max_runs, max_memory_mb=max_memory_mb,
        single=single, burst=burst, maintenance=not no_maintenance, parent_pid=parent_pid,
        metrics_port=metrics_port, metrics_host=metrics_host,
    )  # fmt: skip
    with startup("worker"):
        code = launcher.run(options)
    raise typer.Exit(code)


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
    from bot.cli.doctor import replay, run_checks

    settings = _settings("doctor")
    if replay_dead_letters:
        code, text = replay(settings)
        typer.echo(text, err=code != 0)
        raise typer.Exit(code)
    checks = run_checks(settings)
    for check in checks:
        typer.echo(f"{check.mark:<4} {check.name}: {check.detail}")  # "ok   name: …"
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)


app.add_typer(importlib.import_module("bot.cli.subagents_ops").app, name="subagents")
app.add_typer(importlib.import_module("bot.cli.schedules_ops").app, name="schedules")
app.add_typer(
    importlib.import_module("bot.bench.bench_commands").app, name="bench", cls=FlagsAsFlags
)


def main() -> None:
    with contextlib.suppress(BrokenPipeError):
        app(prog_name="fanbot")
    sys.stdout.flush()
