"""``fanbot bench soak|latency|stop|compare|many|chaos|map|commands|ratelimit``: benchmarks against real
processes and the fakes.

They start their own private Redis, workers and the fake model (the processes they start
get a scrubbed environment; nothing external is touched), print their figures, and exit 1
when a check fails (``soak``, ``many``: a run lost or announced twice; ``soak``: a dead
letter, RSS growth past the bound).
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from bot.errors import FanbotError
from bot.supervise.signals import stop_on_signal

app = typer.Typer(
    name="bench",
    help="Benchmarks: soak (many runs, counts every announce), latency, stop, compare (vs bare "
    "RQ, goals met or missed), many (1,000 runs at once in the threads pool), chaos (workers SIGKILLed at random: runs resume, lose nothing), map (the code's "
    "shape and the modules one message runs through), commands (Redis commands per subagent "
    "run), ratelimit (64 runs against a fake allowing 120 requests a minute: none over it).",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _interruptible() -> None:
    # SIGTERM ends a benchmark like Ctrl-C: its cleanup runs (the private Redis, gateway and
    # workers are stopped) instead of the process vanishing and leaving them running.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def _log_dir_option(*, kept: str) -> Any:
    """The ``--log-dir`` option of a benchmark whose logs, by default in a temporary
    directory, are kept on ``kept``."""
    return typer.Option(help=f"Keep process logs here (default: temp, kept on {kept}).")


def _pool_option(*, both: bool = False) -> Any:
    """``--pool``: the worker pool fanbot's workers run in (``fanbot worker --pool``)."""
    extra = "; both: the threads pool, then the fork pool, beside each other" if both else ""
    return typer.Option(help=f"fanbot's worker pool: fork or threads{extra}.")


def _concurrency_option() -> Any:
    return typer.Option(
        help="threads pool: runs at once per worker process (default: its share of the cap, "
        "plus one slot per queue's dequeuer).",
        min=1,
    )


def _check_pool(command: str, pool: str, choices: tuple[str, ...]) -> None:
    if pool not in choices:
        typer.echo(f"fanbot bench {command}: unknown --pool {pool}; choose from "
                   f"{', '.join(choices)}", err=True)  # fmt: skip
        raise typer.Exit(2)


def _need_psutil() -> None:
    try:
        import psutil  # noqa: F401
    except ImportError:
        typer.echo("fanbot bench: needs psutil (pip install 'fanbot[test]')", err=True)
        raise typer.Exit(2) from None


@app.command()
def soak(
    runs: Annotated[int, typer.Option(help="Subagent runs to spawn.", min=1)] = 1000,
    workers: Annotated[int, typer.Option(help="RQ worker processes.", min=1, max=64)] = 4,
    seed: Annotated[int, typer.Option(help="Seeds the plan (delays, failures).")] = 1,
    fail_rate: Annotated[
        float,
        typer.Option(help="Share of runs whose model fails (half 500, half 429).", min=0, max=1),
    ] = 0.05,
    hang_rate: Annotated[
        float, typer.Option(help="Share of runs that hang to timeout.", min=0, max=1)
    ] = 0.01,
    max_delay: Annotated[float, typer.Option(help="Max model delay in seconds.", min=0)] = 0.3,
    topics: Annotated[int, typer.Option(help="Telegram forum topics to spread over.", min=1)] = 20,
    max_concurrent: Annotated[
        int | None, typer.Option(help="subagents.max_concurrent (default: --workers).")
    ] = None,
    telegram_faults: Annotated[
        int, typer.Option(help="Failed Telegram sends to inject (429 and 502).", min=0)
    ] = 10,
    archive_after_minutes: Annotated[
        float, typer.Option(help="subagents.archive_after_minutes (the bench waits for it).")
    ] = 0.5,
    rss_bound_mb: Annotated[
        float,
        typer.Option(
            help="Allowed RSS growth past warm-up (the first tenth of the runs) to the end, per process kind."
        ),
    ] = 16.0,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds to wait for all runs (default 120 + 1/run).")
    ] = None,
    pool: Annotated[str, _pool_option()] = "threads",
    concurrency: Annotated[int | None, _concurrency_option()] = None,
    log_dir: Annotated[Path | None, _log_dir_option(kept="FAIL")] = None,
) -> None:
    """Spawn many runs through gateway + workers + fakes; count lost and duplicated announces."""
    from bot.bench.soak import SoakConfig, run_soak

    _check_pool("soak", pool, ("fork", "threads"))
    _need_psutil()
    directory = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-soak-"))
    config = SoakConfig(
        runs=runs, workers=workers, seed=seed, fail_rate=fail_rate, hang_rate=hang_rate,
        max_delay=max_delay, topics=topics, max_concurrent=max_concurrent,
        telegram_faults=telegram_faults, archive_after_minutes=archive_after_minutes,
        rss_bound_mb=rss_bound_mb, timeout=timeout, log_dir=directory, pool=pool,
        concurrency=concurrency, report=lambda line: typer.echo(line, err=True),
    )  # fmt: skip
    try:
        with stop_on_signal() as stopping:  # spawning and waits stop, then its processes end
            result = asyncio.run(run_soak(dataclasses.replace(config, stopping=stopping)))
    except FanbotError as exc:
        typer.echo(f"fanbot bench soak: {exc}\nlogs: {directory}", err=True)
        raise typer.Exit(1) from None
    failed = bool(result.failures())
    if log_dir is None and not failed:
        shutil.rmtree(directory, ignore_errors=True)
        result.log_dir = ""
    typer.echo(result.table())
    raise typer.Exit(1 if failed else 0)


@app.command()
def latency(
    runs: Annotated[int, typer.Option(help="Subagent runs.", min=1)] = 24,
    workers: Annotated[int, typer.Option(help="RQ worker processes.", min=1, max=64)] = 4,
    batch: Annotated[int, typer.Option(help="Spawns per chat message.", min=1, max=16)] = 3,
) -> None:
    """Spawn -> subagent start and finish -> announce delivered (median, p95, max)."""
    from bot.bench.latency import run_latency

    for line in asyncio.run(run_latency(runs=runs, workers=workers, batch=batch)):
        typer.echo(line)


@app.command()
def stop(
    stops: Annotated[int, typer.Option(help="Runs to stop.", min=1)] = 20,
) -> None:
    """`/subagents stop` -> status stopped, and -> announce delivered (median, p95, max)."""
    from bot.bench.stop_latency import run_stop

    for line in asyncio.run(run_stop(stops=stops)):
        typer.echo(line)


@app.command()
def compare(
    pool: Annotated[str, _pool_option(both=True)] = "threads",
    workers: Annotated[
        int,
        typer.Option(
            help="The cap (subagents.max_concurrent); bare RQ workers; fork-pool workers.", min=1
        ),
    ] = 8,
    processes: Annotated[int, typer.Option(help="threads pool: worker processes.", min=1)] = 1,
    concurrency: Annotated[int | None, _concurrency_option()] = None,
    repeat: Annotated[int, typer.Option(help="Repetitions (min/median/p99 over them).", min=1)] = 3,
    runs: Annotated[
        int | None, typer.Option(help="Makespan runs (default 100; --quick 16).", min=1)
    ] = None,
    model_seconds: Annotated[
        float | None, typer.Option(help="Model latency in the makespan (default 2; --quick 0.5).")
    ] = None,
    throughput_runs: Annotated[
        int | None, typer.Option(help="Runs for runs/minute (default 200; --quick 48).", min=1)
    ] = None,
    burst: Annotated[int, typer.Option(help="Spawns at once / runs in one thread.", min=1)] = 8,
    samples: Annotated[int, typer.Option(help="Single spawns per repetition.", min=1)] = 5,
    quick: Annotated[bool, typer.Option(help="Small numbers: a run of about a minute.")] = False,
    kill: Annotated[
        bool, typer.Option(help="Measure worker process SIGKILL -> its runs ended.")
    ] = True,
    only: Annotated[
        str,
        typer.Option(
            help="Comma-separated figures to measure: spawn, announce, memory, makespan, "
            "throughput, stop, commands (Redis commands per run), kill, slope (PSS per run in "
            "one threads-pool process at 0 / 100 / 200 runs; --quick 0 / 20 / 40) "
            "(default: all)."
        ),
    ] = "",
    plot: Annotated[
        Path | None, typer.Option(help="Also draw the figures into this PNG (fanbot[plot]).")
    ] = None,
    log_dir: Annotated[Path | None, _log_dir_option(kept="error")] = None,
    goals: Annotated[
        bool,
        typer.Option(
            "--goals/--no-goals",
            help="Judge each goal met or missed and exit 1 when one is missed; "
            "--no-goals only measures (exit 0).",
        ),
    ] = True,
) -> None:
    """fanbot against bare RQ on one private Redis: latency, makespan, PSS, throughput, stop,
    a worker's death, Redis commands; each goal met or missed, per pool (exit 1: one missed)."""
    from bot.bench.compare import run_compare
    from bot.bench.compare_env import PHASES, CompareConfig
    from bot.bench.compare_report import outcome

    _check_pool("compare", pool, ("threads", "fork", "both"))
    chosen = frozenset(p.strip() for p in only.split(",") if p.strip()) or PHASES
    if unknown := sorted(chosen - PHASES):
        typer.echo(f"fanbot bench compare: unknown --only {', '.join(unknown)}; "
                   f"choose from {', '.join(sorted(PHASES))}", err=True)  # fmt: skip
        raise typer.Exit(2)
    directory = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-compare-"))
    config = CompareConfig(
        workers=workers, repeat=repeat, burst=burst, samples=samples, kill=kill, only=chosen,
        pools=("threads", "fork") if pool == "both" else (pool,), processes=processes,
        concurrency=concurrency, slope_points=(0, 20, 40) if quick else (0, 100, 200),
        makespan_runs=runs or (16 if quick else 100),
        model_seconds=model_seconds or (0.5 if quick else 2.0),
        throughput_runs=throughput_runs or (48 if quick else 200),
        log_dir=directory, report=lambda line: typer.echo(line, err=True),
    )  # fmt: skip
    try:
        with stop_on_signal() as stopping:  # the phases stop, then its processes are ended
            result = asyncio.run(run_compare(dataclasses.replace(config, stopping=stopping)))
    except FanbotError as exc:
        typer.echo(f"fanbot bench compare: {exc}\nlogs: {directory}", err=True)
        raise typer.Exit(1) from None
    if log_dir is None:
        shutil.rmtree(directory, ignore_errors=True)
    text, code = outcome(result, goals=goals)
    typer.echo(text)
    if plot is not None and not result.plot(plot):
        typer.echo("fanbot bench compare: no plot: matplotlib is missing "
                   "(pip install 'fanbot[plot]')", err=True)  # fmt: skip
    raise typer.Exit(code)


@app.command()
def many(
    runs: Annotated[
        int,
        typer.Option(help="Subagents running at once (= the cap; at most 1000).", min=1, max=1000),
    ] = 1000,
    processes: Annotated[int, typer.Option(help="Worker processes.", min=1, max=64)] = 4,
    concurrency: Annotated[int | None, _concurrency_option()] = None,
    stream_seconds: Annotated[
        float, typer.Option(help="How long the fake model streams each answer.", min=0.1)
    ] = 45.0,
    chunk_seconds: Annotated[
        float, typer.Option(help="Seconds between two chunks of a stream.", min=0.01)
    ] = 1.0,
    topics: Annotated[int, typer.Option(help="Telegram forum topics to spread over.", min=1)] = 20,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for every announce (default stream + 120 + runs/5)."),
    ] = None,
    log_dir: Annotated[Path | None, _log_dir_option(kept="FAIL")] = None,
) -> None:
    """1,000 subagents running at once in the threads pool, the model streaming slowly: total
    PSS of the worker processes (goal <= 1.5 GB), lost and duplicated announces, announce p99."""
    from bot.bench.many import ManyConfig, run_many

    _need_psutil()
    directory = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-many-"))
    config = ManyConfig(
        runs=runs, processes=processes, concurrency=concurrency, stream_seconds=stream_seconds,
        chunk_seconds=chunk_seconds, topics=topics, timeout=timeout, log_dir=directory,
        report=lambda line: typer.echo(line, err=True),
    )  # fmt: skip
    try:
        with stop_on_signal() as stopping:  # the waits stop, then its processes end
            result = asyncio.run(run_many(dataclasses.replace(config, stopping=stopping)))
    except FanbotError as exc:
        typer.echo(f"fanbot bench many: {exc}\nlogs: {directory}", err=True)
        raise typer.Exit(1) from None
    failed = bool(result.failures())
    if log_dir is None and not failed:
        shutil.rmtree(directory, ignore_errors=True)
        result = dataclasses.replace(result, log_dir="")
    typer.echo(result.table())
    raise typer.Exit(1 if failed else 0)


@app.command()
def ratelimit(
    runs: Annotated[int, typer.Option(help="Subagent runs, all at once.", min=1, max=1000)] = 64,
    calls: Annotated[int, typer.Option(help="Model calls per run.", min=1, max=20)] = 3,
    limit: Annotated[int, typer.Option(help="Requests a minute the fake allows.", min=1)] = 120,
    window_seconds: Annotated[
        float,
        typer.Option(
            help="The fake's (and the workers') window; under 60 scales the minute.", min=1, max=60
        ),
    ] = 60.0,
    limiter: Annotated[
        bool, typer.Option(help="Tell the workers the limit (--no-limiter: the before).")
    ] = True,
    processes: Annotated[int, typer.Option(help="Worker processes.", min=1, max=64)] = 2,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds to wait for every announce.")
    ] = None,
    log_dir: Annotated[Path | None, _log_dir_option(kept="FAIL")] = None,
) -> None:
    """Runs against a fake model that allows LIMIT requests a minute (429 + Retry-After past
    it): requests over the limit (goal 0), runs failed by 429 (goal 0), total time."""
    from bot.bench.ratelimit import RateLimitConfig, run_ratelimit

    directory = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-ratelimit-"))
    config = RateLimitConfig(
        runs=runs, calls=calls, limit=limit, window_seconds=window_seconds, limiter=limiter,
        processes=processes, timeout=timeout, log_dir=directory,
        report=lambda line: typer.echo(line, err=True),
    )  # fmt: skip
    try:
        with stop_on_signal() as stopping:
            result = asyncio.run(run_ratelimit(dataclasses.replace(config, stopping=stopping)))
    except FanbotError as exc:
        typer.echo(f"fanbot bench ratelimit: {exc}\nlogs: {directory}", err=True)
        raise typer.Exit(1) from None
    failed = bool(result.failures())
    if log_dir is None and not failed:
        shutil.rmtree(directory, ignore_errors=True)
        result = dataclasses.replace(result, log_dir="")
    typer.echo(result.table())
    raise typer.Exit(1 if failed else 0)


@app.command()
def chaos(
    runs: Annotated[int, typer.Option(help="Subagent runs to spawn (per pool).", min=1)] = 200,
    kills: Annotated[
        int,
        typer.Option(help="SIGKILLs per pool (at least 2 of 4 or more kill a whole host).", min=0),
    ] = 12,
    pool: Annotated[str, _pool_option(both=True)] = "both",
    seed: Annotated[int, typer.Option(help="Seeds the plan and the kills.")] = 1,
    turns: Annotated[int, typer.Option(help="Main-agent turns (user messages).", min=0)] = 20,
    max_concurrent: Annotated[int, typer.Option(help="subagents.max_concurrent.", min=1)] = 8,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Worker processes per host (default: fork max-concurrent + 2, threads 2; "
            "either way one host carries the cap alone).",
            min=1,
            max=64,
        ),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds to wait for all runs (default 180 + 1/run).")
    ] = None,
    log_dir: Annotated[Path | None, _log_dir_option(kept="FAIL")] = None,
) -> None:
    """Runs with tools (write_file, execute, web_fetch) while worker processes and whole
    hosts are SIGKILLed at random, then fresh ones start: lost runs, duplicated announces,
    runs ended unknown, resume latency p50/p99 (process and host deaths), model calls
    repeated, interrupted tool calls, turns answered once. Goals met or missed, per pool."""
    from bot.bench.chaos import ChaosConfig, run_chaos
    from bot.bench.chaos_report import table

    _check_pool("chaos", pool, ("fork", "threads", "both"))
    _need_psutil()
    directory = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-chaos-"))
    pools = ["threads", "fork"] if pool == "both" else [pool]
    results = []
    try:
        with stop_on_signal() as stopping:
            for name in pools:
                config = ChaosConfig(
                    runs=runs, kills=kills, pool=name, seed=seed, turns=turns,
                    max_concurrent=max_concurrent, workers=workers, timeout=timeout,
                    log_dir=directory / name,
                    report=lambda line: typer.echo(line, err=True), stopping=stopping,
                )  # fmt: skip
                results.append(asyncio.run(run_chaos(config)))
    except FanbotError as exc:
        typer.echo(f"fanbot bench chaos: {exc}\nlogs: {directory}", err=True)
        raise typer.Exit(1) from None
    failed = any(r.failures() for r in results)
    if log_dir is None and not failed:
        shutil.rmtree(directory, ignore_errors=True)
        for result in results:
            result.log_dir = ""
    typer.echo(table(results))
    raise typer.Exit(1 if failed else 0)


@app.command(name="map")
def code_map(
    paths: Annotated[
        bool, typer.Option(help="Also run a spawn and a stop in this process and trace them.")
    ] = True,
    verbose: Annotated[bool, typer.Option(help="List the modules of each traced path.")] = False,
) -> None:
    """The code's figures for this checkout: production lines; modules a Slack message that
    spawns one subagent runs through up to its announce, and `/subagents stop N` up to its
    reply and announce, with the stop's Redis commands; raw Redis uses outside bot/store/
    (`deps.redis`); import cycles (modules, packages); shared module names and top-level
    modules of bot/; `duplicates` pairs; run title f-strings. The paths run in this process
    (gateway, Slack adapter on FakeSlack, fake model, private Redis, an RQ SimpleWorker
    thread) under a profile hook that records every production module with code executed
    in the window, in any thread (background loops too: counts move by a module or two
    between runs). See bot/bench/code_map.py and bot/bench/path_trace.py."""
    from bot.bench.map_report import report

    report(typer.echo, paths=paths, verbose=verbose)


@app.command(name="commands")
def run_commands(
    runs: Annotated[int, typer.Option(help="Subagent runs, one after another.", min=1)] = 20,
    via: Annotated[
        str, typer.Option(help="command (/subagents spawn) or turn (the model spawns).")
    ] = "command",
    pool: Annotated[str, typer.Option(help="The workers' pool: threads or fork.")] = "threads",
    workers: Annotated[int, typer.Option(help="RQ worker processes.", min=1, max=64)] = 2,
    burst: Annotated[
        int, typer.Option(help="Runs spawned at once (each in its thread), then the next.", min=1)
    ] = 1,
    sites: Annotated[bool, typer.Option(help="Also list the commands by code (MONITOR).")] = True,
) -> None:
    """Redis commands per subagent run, spawn -> announce delivered: INFO commandstats'
    delta over the runs, idle traffic subtracted, by command and by code (the script or
    the key family that issued it). See bot/bench/run_commands.py."""
    from bot.bench.run_commands import run_measure

    if via not in ("command", "turn") or pool not in ("fork", "threads"):
        typer.echo("fanbot bench commands: --via command|turn, --pool fork|threads", err=True)
        raise typer.Exit(2)
    result = run_measure(runs=runs, via=via, pool=pool, workers=workers, burst=burst, monitor=sites)
    for line in result.lines(sites=sites):
        typer.echo(line)
