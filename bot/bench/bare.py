"""Bare RQ, the baseline of ``fanbot bench compare``: plain workers and jobs that do nothing.

:class:`BarePool` starts ``count`` plain ``rq`` worker processes (``python -m
bot.bench.bare``) on one queue of the benchmark's Redis; each forks a work horse per job
like fanbot's workers do, but imports nothing of fanbot's run machinery. The jobs return
their own wall-clock times, so the benchmark reads when each started without adding a
Redis round trip inside the measured window.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

QUEUE = "bench-bare"


def noop() -> float:
    """A job that does nothing; returns when it started (``time.time()``)."""
    return time.time()


def nap(seconds: float) -> list[float]:
    """A job that sleeps like a model answering; returns ``[started, ended]``."""
    started = time.time()
    time.sleep(seconds)
    return [started, time.time()]


class BarePool:
    """``count`` plain RQ worker processes on :data:`QUEUE`."""

    def __init__(self, *, url: str, count: int, log_path: Path, env: Mapping[str, str]) -> None:
        self.url, self.count, self.log_path, self.env = url, count, log_path, dict(env)
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> BarePool:
        cmd = [sys.executable, "-m", "bot.bench.bare", "--url", self.url]
        with self.log_path.open("ab") as log:
            self.processes = [self._one(cmd, log) for _ in range(self.count)]
        return self

    def _one(self, cmd: list[str], log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]

    def stop(self, timeout: float = 10.0) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.processes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes = []


def main(argv: Sequence[str] | None = None) -> int:
    """Run one plain RQ worker on :data:`QUEUE` until SIGTERM."""
    from redis import Redis
    from rq import Queue, Worker
    from rq.serializers import JSONSerializer

    args = argparse.ArgumentParser(prog="bare-rq-worker")
    args.add_argument("--url", required=True)
    url = args.parse_args(argv).url
    conn = Redis.from_url(url)
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    worker = Worker([queue], connection=conn, serializer=JSONSerializer)
    worker.work(logging_level="WARNING", with_scheduler=False)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
