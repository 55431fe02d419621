"""``fanbot console``: private Redis, workers, gateway and a terminal chat in one command.

With no model endpoint configured it serves the offline demo model from
:mod:`bot.testing` on a loopback port and says so in a banner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from adapters.console.channel import ConsoleChannel
from adapters.console.convert import thread_ref
from bot.config import Settings
from bot.gateway.runtime import Gateway
from bot.redis_server import RedisServer
from bot.sessions import requester_session_key
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import demo_model

log = logging.getLogger(__name__)

OFFLINE_BANNER = (
    "⚠ No model endpoint configured (FANBOT_OPENAI__BASE_URL / OPENAI_API_KEY): using the "
    "OFFLINE SCRIPTED DEMO MODEL. Answers are canned; fan-out, progress and announces are real."
)


def start_workers(env: dict[str, str], count: int, log_path: Path) -> subprocess.Popen[bytes]:
    log_file = log_path.open("ab")
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workers",
                "--count",
                str(count),
                "--parent-pid",
                str(os.getpid()),
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the console only; it shuts workers down
        )
    finally:
        log_file.close()


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process group (launcher and its workers), SIGKILL it after ``timeout``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("workers did not stop within %.0fs; killing them", timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def wait_idle(
    gateway: Gateway, channel: ConsoleChannel, settings: Settings, limit: float
) -> bool:
    """Wait until every turn and run started from the console has been delivered."""
    deadline = time.monotonic() + limit
    quiet = 0
    while time.monotonic() < deadline:
        keys = [
            requester_session_key(agent_id=settings.agent_id, thread=thread_ref(t))
            for t in channel.threads
        ]
        pending = sum([await gateway.pending_work(k) for k in keys])
        quiet = quiet + 1 if pending == 0 else 0
        if quiet >= 3:
            return True
        await asyncio.sleep(0.2)
    return False


async def _interrupted_before(done: asyncio.Event) -> bool:
    """Wait for ``done`` or SIGTERM (SIGINT arrives as KeyboardInterrupt via asyncio.run)."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, interrupted.set)
    waiters = [asyncio.create_task(done.wait()), asyncio.create_task(interrupted.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
        loop.remove_signal_handler(signal.SIGTERM)
    return interrupted.is_set()


async def run_console(
    settings: Settings,
    *,
    workers: int = 4,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    external_redis: bool = False,
) -> int:
    """Run the whole product locally until end of input (or Ctrl-C)."""
    out = stdout or sys.stdout
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    redis_server = None if external_redis else RedisServer(data_dir=state / "redis").start()
    fake: FakeOpenAI | None = None
    worker_proc: subprocess.Popen[bytes] | None = None
    gateway: Gateway | None = None
    try:
        env = dict(os.environ)
        update: dict[str, object] = {}
        if redis_server is not None:
            env["FANBOT_REDIS_URL"] = update["redis_url"] = redis_server.url
        if not settings.openai.configured:
            fake = await FakeOpenAI(demo_model(), models=[settings.openai.model]).start()
            env["FANBOT_OPENAI__BASE_URL"] = fake.base_url
            settings.openai.base_url = fake.base_url
            print(OFFLINE_BANNER, file=out, flush=True)
        settings = settings.model_copy(update=update)
        worker_proc = start_workers(env, workers, state / "workers.log")
        channel = ConsoleChannel(stdin=stdin, stdout=out)
        gateway = Gateway(settings=settings, adapters=[channel])
        await gateway.start()
        print(
            "fanbot console — type a message; Ctrl-D to finish, Ctrl-C to quit.",
            file=out,
            flush=True,
        )
        if await _interrupted_before(channel.eof):
            print("(interrupted; shutting down)", file=out, flush=True)
            return 130
        limit = settings.subagents.run_timeout_seconds + settings.turn_timeout_seconds
        if not await wait_idle(gateway, channel, settings, limit):
            print("(gave up waiting for unfinished runs)", file=out, flush=True)
            return 1
        return 0
    finally:
        if gateway is not None:
            await gateway.stop()
        if worker_proc is not None:
            await asyncio.to_thread(stop_process, worker_proc)
        if fake is not None:
            await fake.aclose()
        if redis_server is not None:
            with contextlib.suppress(Exception):
                redis_server.stop()
