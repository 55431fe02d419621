"""A launcher whose workers cannot start gives up and says why, instead of restarting them
forever while runs wait in silence; workers killed by a signal are just restarted."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.testing.wait import wait_until

pytestmark = pytest.mark.e2e


def launcher(redis_url: str, failpoints: str) -> subprocess.Popen[str]:
    env = {**os.environ, "FANBOT_REDIS_URL": redis_url, "FANBOT_CONFIG": os.devnull}
    env["FANBOT_FAILPOINTS"] = failpoints
    cmd = [sys.executable, "-m", "workers", "--count", "1", "--no-maintenance"]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_workers_that_cannot_start_make_the_launcher_give_up(redis_url: str) -> None:
    start = time.monotonic()
    proc = launcher(redis_url, "worker.start=raise")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "workers exit right after starting" in out and "giving up" in out
    assert time.monotonic() - start < 30


def test_workers_killed_by_a_signal_are_restarted_not_given_up_on(redis_url: str) -> None:
    proc = launcher(redis_url, "worker.start=kill")  # each new worker SIGKILLs itself
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        # Negative check: four kills in a row must not end it (however slowly, on a busy
        # machine, each worker gets as far as killing itself).
        deadline = time.monotonic() + 60
        while sum("exited with -9; restarting" in line for line in lines) < 4:
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    out = "".join(lines)
    assert "giving up" not in out


def test_a_launcher_waiting_for_redis_exits_when_its_parent_dies(tmp_path: Path) -> None:
    """The console (or a test) dies while its launcher still waits for an unreachable
    Redis: the launcher must not linger."""
    env = {**os.environ, "FANBOT_REDIS_URL": "redis://127.0.0.1:1/0", "FANBOT_CONFIG": os.devnull}
    pid_file, log = tmp_path / "launcher.pid", tmp_path / "launcher.log"
    script = (
        f"{shlex.quote(sys.executable)} -m workers --count 1 --no-maintenance "
        f"--parent-pid $$ > {shlex.quote(str(log))} 2>&1 & "
        f"echo $! > {shlex.quote(str(pid_file))}; wait"
    )
    parent = subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", timeout=60)
    launcher_pid = int(pid_file.read_text())
    try:
        # Waiting for Redis once it says so (its start-up takes seconds on a busy machine).
        wait_until(lambda: log.exists() and "cannot reach Redis" in log.read_text(), timeout=60)
        assert _alive(launcher_pid)
        parent.kill()
        parent.wait()
        wait_until(lambda: not _alive(launcher_pid), timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(launcher_pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (its new parent reaps it); so is a process reaped
    # between the two looks.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
