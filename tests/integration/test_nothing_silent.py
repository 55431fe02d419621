"""Nothing silent (issue 30): through the real command line, a ``FANBOT_*`` variable that
sets nothing is a start-up warning and a doctor line, a half-configured platform names what
is missing, and the doctor says whether a worker listens on the queues the gateway feeds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import redis

from bot.store.jobs import SUBAGENTS_QUEUE, TURNS_QUEUE, Jobs
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.stack import WorkerPool, hermetic_env
from tests.integration.test_cli_startup import run
from tests.integration.test_doctor import RIGHT_KEY, KeyedOpenAI, doctor

TYPO = {"FANBOT_REDIS_URLL": "redis://x", "FANBOT_TELEGRAM_BOT_TOKEN": "1:a"}


def env(redis_url: str, model: FakeOpenAI) -> dict[str, str]:
    return {
        "FANBOT_REDIS_URL": redis_url,
        "FANBOT_OPENAI__BASE_URL": model.base_url,
        "FANBOT_OPENAI__API_KEY": RIGHT_KEY,
        "FANBOT_MODELS__ENDPOINTS__LOCAL__BASE_URL": model.base_url,  # no false warning
    }


async def test_an_unknown_variable_is_a_doctor_warning(tmp_path: Path, redis_url: str) -> None:
    async with KeyedOpenAI(models=("gpt-4o-mini",)) as model:
        clean = await doctor(tmp_path, **env(redis_url, model))
        assert not [ln for ln in clean.stdout.splitlines() if ln[5:].startswith("environment")]
        assert "warning" not in clean.stderr
        report = await doctor(tmp_path, **env(redis_url, model), **TYPO)
    assert report.line("environment") == (
        "warn environment: FANBOT_REDIS_URLL is not a setting (did you mean FANBOT_REDIS_URL?); "
        "FANBOT_TELEGRAM_BOT_TOKEN is not a setting (did you mean FANBOT_TELEGRAM__BOT_TOKEN?)"
    )
    assert report.stderr.splitlines() == [
        "fanbot doctor: warning: FANBOT_REDIS_URLL is not a setting "
        "(did you mean FANBOT_REDIS_URL?)",
        "fanbot doctor: warning: FANBOT_TELEGRAM_BOT_TOKEN is not a setting "
        "(did you mean FANBOT_TELEGRAM__BOT_TOKEN?)",
    ]


def test_every_command_warns_at_start_up(tmp_path: Path) -> None:
    """The gateway (no platform: exits 2 after the warning) and an operator command."""
    for command in ("gateway", "subagents list"):
        proc = run(tmp_path, command, {"FANBOT_REDIS_URLL": "redis://x", "FANBOT_CONFIG": ""})
        first = proc.stderr.splitlines()[0]
        assert first == (
            f"fanbot {command.split()[0]}: warning: FANBOT_REDIS_URLL is not a setting "
            "(did you mean FANBOT_REDIS_URL?)"
        ), proc.stderr


def test_a_half_configured_platform_names_what_is_missing(tmp_path: Path) -> None:
    half = {"FANBOT_MATRIX__HOMESERVER": "https://matrix.example", "FANBOT_CONFIG": ""}
    for command in ("gateway", "doctor"):
        proc = run(tmp_path, command, half)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr == (
            f"fanbot {command}: FANBOT_MATRIX__HOMESERVER is set but FANBOT_MATRIX__USER_ID "
            "and FANBOT_MATRIX__PASSWORD (or FANBOT_MATRIX__ACCESS_TOKEN) are not: Matrix "
            "needs the homeserver, the bot's user id and its password or access token\n"
        )
    webhook = {"FANBOT_TELEGRAM__WEBHOOK_URL": "https://b.example/tg", "FANBOT_CONFIG": ""}
    proc = run(tmp_path, "gateway", {**webhook, "FANBOT_TELEGRAM__WEBHOOK_SECRET": "s3"})
    assert proc.returncode == 2
    assert "FANBOT_TELEGRAM__BOT_TOKEN is not" in proc.stderr
    assert "no platform configured" not in proc.stderr


async def test_the_workers_line_flips_when_a_worker_starts(tmp_path: Path, redis_url: str) -> None:
    async with KeyedOpenAI(models=("gpt-4o-mini",)) as model:
        none = await doctor(tmp_path, **env(redis_url, model))
        assert none.line("workers") == (
            "warn workers: no worker listens on turns, subagents: start `fanbot worker` "
            "(messages wait unanswered until one does)"
        )
        pool = WorkerPool(env=hermetic_env({"redis_url": redis_url}), count=1,
                          log_path=tmp_path / "workers.log").start()  # fmt: skip
        try:
            await asyncio.to_thread(wait_for_worker, redis_url)
            one = await doctor(tmp_path, **env(redis_url, model))
        finally:
            pool.stop()
    line = one.line("workers")
    assert line.startswith("ok   workers: 1 worker(s) on turns, subagents (hosts "), line


def wait_for_worker(redis_url: str, timeout: float = 60.0) -> None:
    """Until a worker registered in Redis listens on both queues."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(
                {TURNS_QUEUE, SUBAGENTS_QUEUE} <= set(w.queues)
                for w in Jobs(redis=client).workers()
            ):
                return
            time.sleep(0.2)
        raise AssertionError("no worker registered")
    finally:
        client.close()
