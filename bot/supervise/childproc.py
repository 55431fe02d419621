"""Stopping a child process we started: politely first, then for sure.

Shared by the private ``redis-server`` (:mod:`bot.redis.server`) and the test servers in
:mod:`bot.testing`, which may import it (this module imports nothing from them).
"""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any] | None, *, timeout: float) -> None:
    """SIGTERM ``proc`` and wait for it; SIGKILL it if it is still running after ``timeout``
    seconds. Nothing happens if there is no process or it has exited already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
