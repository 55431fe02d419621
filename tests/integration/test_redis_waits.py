"""Every long-running process names an unreachable Redis within seconds, says so at each
back-off step, and says when it is back: ``fanbot worker`` (the launcher and each worker)
and ``fanbot gateway``, as real subprocesses, against a port where Redis starts later and
then goes away and comes back again.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.testing.netutil import free_port
from tests.integration.test_cli_startup import clean_env
from tests.redis_support import Server

SECRET = "hunter22-secret"


STARTUP = 15.0
"""Seconds from the process's start to its first "cannot reach Redis" line: the Python start
alone takes ~3.5 s on an idle 2-core machine and more beside the rest of the suite; what this
bounds is that no connect timeout (tens of seconds) comes before the first line."""


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def server(tmp_path: Path, port: int) -> Iterator[Server]:
    redis = Server(data_dir=tmp_path / "redis", port=port, args=["--requirepass", SECRET])
    yield redis
    redis.stop()


def start(
    tmp_path: Path, command: list[str], port: int, **extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    env = clean_env(
        tmp_path, {"FANBOT_REDIS_URL": f"redis://:{SECRET}@127.0.0.1:{port}/0", **extra}
    )
    log = tmp_path / "process.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", *command], env=env, cwd=tmp_path,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    return proc, log


def wait_for(log: Path, pattern: str, *, count: int = 1, timeout: float = 20) -> str:
    """The log once ``pattern`` (a regex) matches ``count`` times; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        if len(re.findall(pattern, text)) >= count:
            return text
        assert time.monotonic() < deadline, f"no {count}× {pattern!r} in:\n{text[-3000:]}"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(40)


def test_the_worker_says_redis_is_unreachable_then_back(
    tmp_path: Path, port: int, server: Server
) -> None:
    proc, log = start(tmp_path, ["worker", "--count", "1"], port)
    where = re.escape(f"127.0.0.1:{port}")
    try:
        began = time.monotonic()
        wait_for(
            log,
            rf"worker launcher pid \d+: cannot reach Redis at {where} \(FANBOT_REDIS_URL\): .*retrying in",
            timeout=STARTUP,
        )
        assert time.monotonic() - began < STARTUP
        text = wait_for(log, rf"launcher pid \d+: cannot reach Redis at {where}", count=2)
        assert "started 1 worker(s)" not in text  # no worker started that could only wait
        server.start()
        wait_for(log, rf"worker launcher pid \d+: Redis at {where} reachable again")
        wait_for(log, r"started 1 worker\(s\)")
        wait_for(log, r"Worker \w+: started with PID|Listening on", timeout=30)
        # An outage while running: the launcher and its worker each say so, then recover.
        server.stop()
        wait_for(log, rf"(launcher )?pid \d+: cannot reach Redis at {where}", count=4, timeout=10)
        # A line per back-off step while it lasts, from the worker process too.
        wait_for(log, rf"\bworker pid \d+: cannot reach Redis at {where}", count=2, timeout=10)
        server.start()
        # The launcher's first recovery line, then the launcher's and the worker's.
        wait_for(log, rf"pid \d+: Redis at {where} reachable again", count=3, timeout=40)
    finally:
        code = stop(proc)
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert SECRET not in text


def test_the_gateway_says_redis_is_unreachable_then_back(
    tmp_path: Path, port: int, server: Server
) -> None:
    telegram = {
        "FANBOT_TELEGRAM__BOT_TOKEN": "42:abc-token",
        "FANBOT_TELEGRAM__API_URL": f"http://127.0.0.1:{free_port()}/bot",
        "FANBOT_GATEWAY__HTTP_PORT": str(free_port()),
    }
    proc, log = start(tmp_path, ["gateway"], port, **telegram)
    where = re.escape(f"127.0.0.1:{port}")
    try:
        began = time.monotonic()
        wait_for(
            log,
            rf"gateway: cannot reach Redis at {where} \(FANBOT_REDIS_URL\): .*retrying in",
            timeout=STARTUP,
        )
        assert time.monotonic() - began < STARTUP
        wait_for(log, rf"gateway: cannot reach Redis at {where}", count=2)
        server.start()
        wait_for(log, rf"gateway: Redis at {where} reachable again")
        server.stop()
        wait_for(log, rf"gateway: cannot reach Redis at {where}", count=4, timeout=10)
        server.start()
        wait_for(log, rf"gateway: Redis at {where} reachable again", count=2, timeout=40)
    finally:
        code = stop(proc)
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert SECRET not in text and "abc-token" not in text


def test_a_gateway_stopped_while_it_waits_for_redis_exits_cleanly(
    tmp_path: Path, port: int
) -> None:
    telegram = {
        "FANBOT_TELEGRAM__BOT_TOKEN": "42:abc",
        "FANBOT_TELEGRAM__API_URL": "http://127.0.0.1:9/bot",
    }
    proc, log = start(tmp_path, ["gateway"], port, **telegram)
    wait_for(log, "gateway: cannot reach Redis", timeout=STARTUP)
    assert stop(proc) == 0
    assert "Traceback" not in log.read_text()
