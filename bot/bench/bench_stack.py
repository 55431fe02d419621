"""What ``fanbot bench compare``, ``soak`` and ``many`` share about the gateway and workers
they start: their settings (a private Redis, the fake model and the Telegram fake), the
worker pool's options, and the check that they are still running."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.bench import BENCH_LIMITS
from bot.deps import Deps
from bot.sessions import qualified_user, requester_session_key
from bot.testing.fake_telegram import FakeTelegram
from bot.testing.stack import GatewayProcess, WorkerPool
from bot.types import ThreadRef

REQUESTER = "1001"
"""The Telegram user id the benchmarks' runs are spawned for (the fake's default sender)."""


def telegram_bench_values(
    *,
    redis_url: str,
    model_url: str,
    tg: FakeTelegram,
    log_dir: Path,
    log_level: str,
    subagents: dict[str, Any],
) -> dict[str, Any]:
    """Settings values (as ``Settings(**values)`` takes them) for a bench over Telegram."""
    return {
        "redis_url": redis_url,
        "key_prefix": "fanbot:",
        "agent_id": "main",
        "state_dir": str(log_dir / "state"),
        "log_level": log_level,
        "openai": {"base_url": model_url, "model": "fake-model", "models": ["fake-model"]},
        "subagents": subagents,
        "limits": BENCH_LIMITS,
        "telegram": {
            "bot_token": tg.token,
            "api_url": tg.api_url,
            "file_url": tg.file_url,
            "poll_timeout_seconds": 1,
        },
    }


POOLS = ("fork", "threads")
DEQUEUER_SLOTS = 2
"""Slots a threads-pool process gets beyond its share of the cap: each queue's dequeuer
(turns, subagents) holds one while it waits for a job (see workers/threaded.py)."""


def threads_concurrency(cap: int, processes: int) -> int:
    """Runs at once per threads-pool process: its share of ``cap``, plus the dequeuers' slots."""
    return math.ceil(cap / processes) + DEQUEUER_SLOTS


def pool_args(pool: str, *, concurrency: int) -> list[str]:
    """The ``fanbot worker`` options that run its workers in ``pool`` (fork or threads)."""
    if pool not in POOLS:
        raise ValueError(f"unknown worker pool {pool!r}; choose from {', '.join(POOLS)}")
    if pool == "threads":
        return ["--pool", "threads", "--concurrency", str(concurrency)]
    return ["--pool", "fork"]


def spawn_in_topic(
    deps: Deps,
    *,
    bot_id: int,
    chat: int,
    topic: int,
    task: str,
    label: str,
    run_timeout: int | None = None,
) -> str:
    """Spawn a run through ``sessions_spawn``'s code path, as :data:`REQUESTER` in a forum
    topic of ``chat``; returns its run id."""
    thread = ThreadRef(platform="telegram", account=str(bot_id), chat=str(chat), thread=str(topic))
    ctx = ToolContext(
        deps=deps,
        session_key=requester_session_key(agent_id="main", thread=thread),
        thread=thread,
        requester=qualified_user("telegram", REQUESTER),
        agent_id="main",
    )
    args = SpawnArgs(task=task, label=label, runTimeoutSeconds=run_timeout)
    return str(spawn(ctx, args)["runId"])


def wait_until(
    check: Callable[[], bool],
    *,
    problem: Callable[[], str | None],
    error: type[Exception],
    timeout: float,
    what: str,
    poll: float,
) -> None:
    """Poll ``check`` every ``poll`` seconds until true; raise ``error`` with ``problem()``
    (say, :func:`stack_problem`) as soon as it names one, or once ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while not check():
        found = problem()
        if found is not None:
            raise error(found)
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def stack_problem(
    *, stopping: threading.Event | None, gateway: GatewayProcess, pool: WorkerPool
) -> str | None:
    """Why the bench cannot go on (interrupted, or a process it started exited), or None."""
    if stopping is not None and stopping.is_set():
        return "interrupted; its processes are stopped"
    if gateway.returncode() is not None:
        return f"the gateway exited:\n{gateway.log()[-3000:]}"
    launcher = pool.launcher
    if launcher is None or launcher.poll() is not None:
        return f"the worker launcher exited; see {pool.log_path}"
    return None
