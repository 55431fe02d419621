"""An end-to-end harness: the real gateway in-process plus forked ``fanbot worker`` processes.

Use it to test a bot the way it runs in production: real Redis (give it a URL, e.g. from
:class:`bot.redis.server.RedisServer`), real RQ workers in other processes, and the fakes
in :mod:`bot.testing` standing in for the model and the platforms::

    values = {"redis_url": url, "openai": {"base_url": fake.base_url}}
    async with Stack(values=values, adapters=[channel], workers=2) as stack:
        await channel.say("hello")
        await until(lambda: len(channel.sent) >= 2)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.config import Settings
from bot.ports import ChannelAdapter
from bot.supervise.childproc import stop_process
from bot.testing.wait import until

if TYPE_CHECKING:
    # Imported when a Stack starts, so importing bot.testing does not load the gateway.
    from bot.commands.router import CommandRouter
    from bot.gateway.runtime import Gateway

_SCRUB = ("FANBOT_", "OPENAI_")


def settings_env(values: Mapping[str, Any]) -> dict[str, str]:
    """``{"subagents": {"max_concurrent": 2}}`` -> ``{"FANBOT_SUBAGENTS": '{"max_concurrent": 2}'}``."""
    env = {}
    for key, value in values.items():
        env[f"FANBOT_{key.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    return env


def hermetic_env(values: Mapping[str, Any]) -> dict[str, str]:
    """This process's environment without any FANBOT_/OPENAI_ variables, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env["FANBOT_CONFIG"] = os.devnull  # read no file (never a developer's fanbot.toml)
    env.update(settings_env(values))
    return env


class WorkerPool:
    """``python -m workers`` launcher processes (each supervising ``count`` RQ workers).

    Args:
        env: Full environment for the processes (see :func:`hermetic_env`).
        count: RQ worker processes per launcher.
        log_path: Where their output goes.
        cwd: Working directory (import root for plug-in tools).
        args: More ``fanbot worker`` options (e.g. ``["--metrics-port", "9100"]``).
        failpoints: ``FANBOT_FAILPOINTS`` for these processes (see :mod:`bot.failpoints`;
            use ``!<path>`` entries, or the launcher, which reads them too, may hit them).
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        count: int = 2,
        log_path: Path,
        cwd: Path | None = None,
        args: Sequence[str] = (),
        failpoints: str = "",
    ) -> None:
        self.env = dict(env)
        if failpoints:
            self.env["FANBOT_FAILPOINTS"] = failpoints
        workers = json.loads(self.env.get("FANBOT_WORKERS") or "{}")
        workers.setdefault("pool", Stack.default_pool)  # as a Stack's workers
        self.env["FANBOT_WORKERS"] = json.dumps(workers)
        self.count = count
        self.args = list(args)
        self.log_path = log_path
        self.cwd = cwd
        self.launcher: subprocess.Popen[bytes] | None = None

    def start(self, *, maintenance: bool = True) -> WorkerPool:
        cmd = [sys.executable, "-m", "workers", "--count", str(self.count)]
        cmd += ["--parent-pid", str(os.getpid()), *self.args]
        if not maintenance:
            cmd.append("--no-maintenance")
        with self.log_path.open("ab") as log:
            self.launcher = subprocess.Popen(
                cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                start_new_session=True,  # a process-group kill in RQ never reaches the test
            )
        return self

    def worker_pids(self) -> list[int]:
        """PIDs of the RQ worker processes (children of the launcher)."""
        import psutil

        if self.launcher is None:
            return []
        try:
            return [c.pid for c in psutil.Process(self.launcher.pid).children()]
        except psutil.NoSuchProcess:
            return []

    @property
    def threads(self) -> bool:
        """Whether the workers run in the threads pool (``FANBOT_WORKERS`` in ``env``)."""
        return bool(json.loads(self.env["FANBOT_WORKERS"]).get("pool") == "threads")

    def run_pids(self) -> list[int]:
        """PIDs of the processes executing jobs now: the work horses in the fork pool, the
        worker processes with an RQ execution in the threads pool. Killing one kills what
        it runs (in the threads pool, every run of that process)."""
        if not self.threads:
            return self.horse_pids()
        from rq import Worker

        from bot.redis.connect import connect

        mine = set(self.worker_pids())
        client = connect(self.env["FANBOT_REDIS_URL"])
        try:
            return sorted(
                w.pid
                for w in Worker.all(connection=client)
                if w.pid in mine and w.get_current_executions(refresh=True)
            )
        finally:
            client.close()

    def horse_pids(self) -> list[int]:
        """PIDs of the work horses (one per job being executed)."""
        import psutil

        pids = []
        for pid in self.worker_pids():
            try:
                pids += [c.pid for c in psutil.Process(pid).children()]
            except psutil.NoSuchProcess:
                continue
        return pids

    def kill_all(self) -> None:
        """SIGKILL the launcher, its workers and their horses (a host dying)."""
        victims = self.horse_pids() + self.worker_pids()
        if self.launcher is not None:
            victims.append(self.launcher.pid)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        if self.launcher is not None:
            self.launcher.wait()
            self.launcher = None

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.launcher = self.launcher, None
        stop_process(proc, timeout=timeout)


class GatewayProcess:
    """``fanbot gateway`` as a real child process (for tests that SIGKILL the gateway).

    Args:
        env: Full environment (see :func:`hermetic_env`); a platform must be configured.
        log_path: Where its output goes (appended).
        failpoints: ``FANBOT_FAILPOINTS`` for this process only (see :mod:`bot.failpoints`).
    """

    def __init__(self, *, env: Mapping[str, str], log_path: Path, failpoints: str = "") -> None:
        self.env = dict(env)
        if failpoints:
            self.env["FANBOT_FAILPOINTS"] = failpoints
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self) -> GatewayProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot", "gateway"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait(self, timeout: float) -> int:
        assert self.process is not None, "not started"
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL (no cleanup at all, like a host dying)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit code."""
        proc = self.process
        if proc is None:
            return None
        stop_process(proc, timeout=timeout)
        return proc.returncode

    def rss_bytes(self) -> int:
        import psutil

        return int(psutil.Process(self.pid).memory_info().rss)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.kill()


class Stack:
    """Gateway + workers against one Redis; an async context manager.

    Args:
        values: Settings as a nested mapping (``redis_url`` required); the gateway gets
            ``Settings(**values)``, the workers the same values through their environment.
            Without ``gateway.http_port`` the gateway's HTTP server (``/metrics``,
            ``/healthz``, ``/readyz``, webhooks) takes a free port: ``stack.gateway.http_port``.
        adapters: Channels for the gateway.
        workers: RQ worker processes to fork (0 to start none).
        router: Command router for the gateway.
        log_dir: Where worker logs go (a temp dir by default).
        pool: The workers' pool, ``fork`` or ``threads`` (``workers.pool`` in ``values``
            wins; default :attr:`default_pool`, fanbot's own default, which a test suite
            may set to run the same tests under both pools).
        failpoints: ``FANBOT_FAILPOINTS`` for the workers (:class:`WorkerPool`).
    """

    default_pool: str = "threads"

    def __init__(
        self,
        *,
        values: Mapping[str, Any],
        adapters: Sequence[ChannelAdapter],
        workers: int = 2,
        router: CommandRouter | None = None,
        log_dir: Path | None = None,
        pool: str | None = None,
        failpoints: str = "",
    ) -> None:
        self.values = dict(values)
        worker_settings = dict(self.values.get("workers") or {})
        worker_settings.setdefault("pool", pool or self.default_pool)
        self.values["workers"] = worker_settings
        gateway = dict(self.values.get("gateway") or {})
        gateway.setdefault("http_port", 0)  # a free port (see Gateway.http_port): never 8080
        self.values["gateway"] = gateway
        self.settings = Settings(**self.values)
        self.adapters = list(adapters)
        self.router = router
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="fanbot-stack-"))
        self.pool = WorkerPool(
            env=hermetic_env(self.values),
            count=workers,
            log_path=self.log_dir / "workers.log",
            cwd=Path.cwd(),
            failpoints=failpoints,
        )
        self.workers = workers
        self.gateway: Gateway | None = None

    async def start_gateway(self) -> Gateway:
        from bot.gateway.runtime import Gateway

        self.gateway = Gateway(settings=self.settings, adapters=self.adapters, router=self.router)
        await self.gateway.start()
        return self.gateway

    async def stop_gateway(self) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    async def __aenter__(self) -> Stack:
        if self.workers:
            self.pool.start()
        await self.start_gateway()
        return self

    async def __aexit__(self, exc_type: object, *_exc: object) -> None:
        if exc_type is not None and self.gateway is not None:
            # A test that failed (a wait timed out, mostly) shows where its runs stood.
            with contextlib.suppress(Exception):
                print(await asyncio.to_thread(self.explain), file=sys.stderr)
        await self.stop_gateway()
        await asyncio.to_thread(self.pool.stop)

    def explain(self, *, log_lines: int = 40) -> str:
        """Where the runs stand (records, fair slots and line, the subagents queue) and the
        tail of the workers' log: printed when a test inside the stack fails."""
        assert self.gateway is not None
        deps = self.gateway.deps
        lines = ["--- fanbot stack state ---"]
        for r in deps.runs.get_many(sorted(deps.runs.active_ids())):
            lines.append(
                f"run {r.run_id[:8]} #{r.seq} {r.status.value} parked_at={r.parked_at} "
                f"approval={r.approval_id or '-'} resume_job={r.resume_job or '-'}"
            )
        line = deps.jobs.fair.line()
        lines.append(f"fair: held={line.held} waiting={line.waiting} admitted={line.admitted}")
        for job_id in [*line.admitted, *deps.jobs.fair.holders()]:
            status = deps.jobs.status(job_id)
            lines.append(f"job {job_id}: {getattr(status, 'value', status) or 'gone'}")
        pool = "threads" if self.pool.threads else "fork"
        lines.append(f"workers: {pool} pool, pids {self.pool.worker_pids()}, "
                     f"executing {self.pool.run_pids()}")  # fmt: skip
        tail = self.worker_log().splitlines()[-log_lines:]
        lines += ["--- workers.log (tail) ---", *tail]
        return "\n".join(lines)

    def worker_log(self) -> str:
        path = self.pool.log_path
        return path.read_text(errors="replace") if path.exists() else ""

    @staticmethod
    async def wait_for(
        condition: Callable[[], bool | Awaitable[bool]],
        *,
        timeout: float = 30.0,
        every: float = 0.05,
    ) -> None:
        """Poll ``condition`` until true; raise ``TimeoutError`` after ``timeout`` seconds.

        The same as :func:`bot.testing.until`, kept for the tests written against it.
        """
        await until(condition, timeout=timeout, every=every)
