"""A launcher whose workers cannot start gives up and says why, instead of restarting them
forever while runs wait in silence; workers killed by a signal are just restarted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

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
    try:
        time.sleep(8)  # negative check: four or more kills in a row must not end it
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert "giving up" not in out
    assert out.count("exited with -9; restarting") >= 3
