"""What ``fanbot bench compare`` and ``fanbot bench soak`` share about the gateway and
workers they start: their settings (a private Redis, the fake model and the Telegram fake)
and the check that they are still running."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from bot.testing.fake_telegram import FakeTelegram
from bot.testing.stack import GatewayProcess, WorkerPool


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
        "telegram": {
            "bot_token": tg.token,
            "api_url": tg.api_url,
            "file_url": tg.file_url,
            "poll_timeout_seconds": 1,
        },
    }


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
