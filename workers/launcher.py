"""The worker launcher: N RQ worker processes plus the maintenance sweep, supervised.

The launcher imports and warms up what a job needs once (:func:`workers.jobs.warm_up`),
then forks each RQ worker from itself before it starts any thread of its own, so the
workers share its pages (see :mod:`workers.forked`); each worker forks one work horse per
job, as RQ does. The launcher restarts a worker that dies (forked the same way) and
forwards SIGTERM/SIGINT for a warm shutdown. ``--single`` runs one worker in the process
itself, warming up on its own.
"""

from __future__ import annotations

import _strptime  # noqa: F401  (RQ parses dates in each worker: imported once, shared)
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from bot.agent.skills import check_skills
from bot.config import Settings, load_settings
from bot.deps import Deps
from bot.errors import ConfigError, RedisUnavailable
from bot.failpoints import Failpoints
from bot.hooks.resolve import check as check_hooks
from bot.logs import configure as configure_logging
from bot.observe import tracing
from bot.observe.serve import EndpointServer, serve_worker_endpoints
from bot.redis.connect import connect
from bot.redis.watch import RedisWatch, wait_until_reachable
from bot.runs.stop import stop_run
from bot.store.jobs import SUBAGENTS_QUEUE, TURNS_QUEUE
from workers import jobs
from workers.callbacks import horse_killed, worker_died
from workers.context import WorkerContext, serving
from workers.forked import Forked, fork_worker
from workers.maintenance import maintenance_loop
from workers.threaded import ThreadsWorker

log = logging.getLogger("fanbot.worker")

DEFAULT_QUEUES = (TURNS_QUEUE, SUBAGENTS_QUEUE)
RESTART_BACKOFF = 1.0
EARLY_EXIT_SECONDS = 10.0
"""A worker that exits sooner than this after its start did not really start."""
GIVE_UP_AFTER_EARLY_EXITS = 3


def _host_pid() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _stop_with_parent(parent_pid: int, stop: threading.Event, done: threading.Event) -> None:
    """Set ``stop`` if the process ``parent_pid`` goes before ``done`` is set."""
    while not done.wait(0.2):
        if os.getppid() != parent_pid:
            stop.set()
            return


def _exit_with_parent(parent_pid: int) -> None:
    """Warm-stop this worker when its launcher is gone (a daemon thread; holds no locks)."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    log.warning("launcher %s is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def run_single(
    settings: Settings,
    queues: Sequence[str],
    *,
    burst: bool = False,
    parent_pid: int | None = None,
    warmed: WorkerContext | None = None,
) -> None:
    """Run one RQ worker in this process until it is told to stop.

    ``warmed`` is the context :func:`workers.jobs.warm_up` built before this process was
    forked; without it the worker warms up itself.
    """
    if parent_pid is not None:
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    Failpoints.from_env().hit("worker.start")  # lets a test make every worker fail at start
    who = f"worker pid {os.getpid()}"
    if not wait_until_reachable(settings.redis_url, who=who):
        return
    if warmed is None:
        context = jobs.warm_up(settings)
    else:
        context = warmed
        tracing.configure(settings, service="worker")  # not in the launcher: see run_pool
    watch = RedisWatch(
        url=settings.redis_url, who=who, probe_key=context.deps.keys.redis_probe(_host_pid())
    )
    watch.start()
    pool = settings.workers
    # The threads pool's RQ bookkeeping shares the runs' one pool (sized to them).
    conn = context.deps.redis if pool.pool == "threads" else connect(settings.redis_url)
    rq_queues = [Queue(q, connection=conn, serializer=JSONSerializer) for q in queues]
    worker: Worker | ThreadsWorker
    if pool.pool == "threads":
        worker = ThreadsWorker(
            rq_queues,
            context=context,
            concurrency=pool.concurrency,
            stop_grace=pool.stop_grace_seconds,
            max_runs=pool.max_runs,
            max_memory_mb=pool.max_memory_mb,
            connection=conn,
            serializer=JSONSerializer,
        )
    else:
        worker = FanbotWorker(
            rq_queues,
            context=context,
            connection=conn,
            serializer=JSONSerializer,
            work_horse_killed_handler=horse_killed,
        )
    try:
        worker.work(burst=burst, logging_level=settings.log_level, with_scheduler=False)
    finally:
        watch.stop()
    if isinstance(worker, ThreadsWorker) and worker.recycle_reason:
        log.info("worker pid %s exits to be replaced: %s", os.getpid(), worker.recycle_reason)


class FanbotWorker(Worker):
    """An RQ worker that serves its jobs a :class:`WorkerContext`, and whose warm
    shutdown is bounded.

    Every job it performs (in the forked horse) runs with ``context`` as the serving one
    (:func:`workers.context.current`). SIGTERM lets the current job finish (RQ's warm
    shutdown); a subagent run still going after ``subagents.shutdown_grace_seconds`` is
    stopped cleanly (``stopped``, partial result, a note naming the shutdown) instead of
    being killed into ``unknown``.

    Args:
        context: What the jobs use (the stores, the model client, the MCP connections).
        *args: RQ's own, as :class:`rq.Worker` takes them.
        **kwargs: RQ's own, as :class:`rq.Worker` takes them.
    """

    _grace_timer: threading.Thread | None = None

    _collecting = True

    def __init__(self, *args: Any, context: WorkerContext, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context = context

    def perform_job(self, job: Any, queue: Any, execution: Any) -> bool:
        with serving(self.context):
            return bool(super().perform_job(job, queue, execution))

    def execute_job(self, job: Any, queue: Any) -> None:
        # No collection in this worker while its horse runs: a collection writes into each
        # object it walks, and every page written here is no longer shared with the horse.
        self._collecting = gc.isenabled()
        gc.disable()
        try:
            super().execute_job(job, queue)
        finally:
            if self._collecting:
                gc.enable()

    def main_work_horse(self, job: Any, queue: Any) -> None:
        # First thing after the fork: the horse's collections then never walk (and copy
        # the pages of) what it inherited from this worker and the launcher.
        gc.freeze()
        if self._collecting:
            gc.enable()
        super().main_work_horse(job, queue)

    def request_stop(self, signum: Any, frame: Any) -> None:
        if self._grace_timer is None:
            self._grace_timer = threading.Thread(
                target=self._stop_run_after_grace, args=(self.context.deps,), daemon=True
            )
            self._grace_timer.start()
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]

    def _stop_run_after_grace(self, deps: Deps) -> None:
        time.sleep(deps.settings.subagents.shutdown_grace_seconds)
        try:
            job = self.get_current_job()
            run_id = deps.jobs.current_run_id(job) if job is not None else None
            if run_id is None:
                return
            result = stop_run(deps, run_id, by="a worker shutdown")
            log.warning("shutdown grace over: run %s stopped (ended=%s)", run_id, result.ended)
        except Exception:
            log.exception("could not stop the current run at shutdown")


def _spawn(
    settings: Settings, queues: Sequence[str], warmed: WorkerContext, http: EndpointServer | None
) -> Forked:
    """Fork one worker from this warmed process (a session of its own: see fork_worker)."""
    parent = os.getpid()

    def work() -> int:
        try:
            run_single(settings, queues, parent_pid=parent, warmed=warmed)
        except (ConfigError, RedisUnavailable) as exc:  # one line and exit 2, as --single
            print(f"fanbot worker: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        return 0

    return fork_worker(work, close=[http.socket] if http is not None else [])


def run_pool(
    settings: Settings,
    *,
    count: int,
    queues: Sequence[str],
    maintenance: bool = True,
    parent_pid: int | None = None,
    metrics_port: int = 0,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Supervise ``count`` workers (and the maintenance sweep) until SIGTERM/SIGINT."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    who = f"worker launcher pid {os.getpid()}"
    # Say what is missing before starting workers that could only wait for it too; a
    # parent that goes meanwhile (the console, a test) ends the wait as a signal would.
    waiting = threading.Event()
    if parent_pid is not None:
        watcher = threading.Thread(
            target=_stop_with_parent, args=(parent_pid, stopping, waiting), daemon=True
        )
        watcher.start()
    reachable = wait_until_reachable(settings.redis_url, who=who, stop=stopping)
    waiting.set()
    if parent_pid is not None:
        watcher.join()  # no thread may run while the workers are forked below
    if not reachable or stopping.is_set():
        return 0
    deps = Deps.build(settings)
    # Tracing stays off here (each worker starts its own exporter); the first forks come
    # before any thread of this process starts, so none holds a lock a worker inherits.
    warmed = jobs.warm_up(settings, trace=False)
    children = [_spawn(settings, queues, warmed, None) for _ in range(count)]
    watch = RedisWatch(
        url=settings.redis_url, who=who, probe_key=deps.keys.redis_probe(_host_pid())
    )
    watch.start()
    sweeper = threading.Thread(
        target=maintenance_loop,
        args=(deps, stopping),
        kwargs={"steady": watch.steady_for},
        name="maintenance",
        daemon=True,
    )
    if maintenance:
        sweeper.start()
    http = serve_worker_endpoints(
        deps, host=metrics_host, port=metrics_port, expected=count,
        pids=lambda: [c.pid for c in children if c.poll() is None],
    )  # fmt: skip
    started = [time.monotonic()] * count
    early_exits, code = 0, 0
    log.info("started %d worker(s) on %s (pids %s)", count, queues, [c.pid for c in children])
    while not stopping.wait(0.5):
        if parent_pid is not None and os.getppid() != parent_pid:
            log.warning("parent process %s is gone; shutting down", parent_pid)
            break
        for i, child in enumerate(children):
            returncode = child.poll()
            if returncode is None:
                continue
            # Killed by a signal (an operator, the OOM killer, a fault test) is not "could
            # not start": only a worker that exits with an error that soon counts.
            failed = returncode > 0
            early = failed and time.monotonic() - started[i] < EARLY_EXIT_SECONDS
            early_exits = early_exits + 1 if early else 0
            if early_exits >= GIVE_UP_AFTER_EARLY_EXITS:
                # A worker that cannot even start (a broken install, a bad setting) would
                # otherwise be restarted forever while runs wait in silence.
                log.error("workers exit right after starting (exit code %s, %d times in a "
                          "row; the reason is above); giving up", child.returncode, early_exits)  # fmt: skip
                stopping.set()
                code = 1
                break
            worker_died(deps, child.pid)  # its run now, not when its heartbeat expires
            log.warning("worker pid %s exited with %s; restarting", child.pid, child.returncode)
            time.sleep(RESTART_BACKOFF)
            children[i], started[i] = _spawn(settings, queues, warmed, http), time.monotonic()
    sub = settings.subagents
    _shutdown(children, sub.shutdown_grace_seconds + sub.hard_kill_grace_seconds + 15)
    watch.stop()
    if http is not None:
        http.shutdown()
    deps.close()
    return code


def _shutdown(children: list[Forked], timeout: float) -> None:
    """Warm shutdown: RQ finishes the current job on SIGTERM; kill what outlives ``timeout``."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """``fanbot worker``'s options (declared, with their help, in :mod:`bot.cli.root`).

    ``pool``, ``concurrency``, ``max_runs`` and ``max_memory_mb`` override the settings'
    ``workers`` section when given; ``parent_pid`` (the console's, a test's) ends the
    launcher when that process is gone.
    """

    count: int
    queues: tuple[str, ...] = DEFAULT_QUEUES
    pool: str | None = None
    concurrency: int | None = None
    max_runs: int | None = None
    max_memory_mb: int | None = None
    single: bool = False
    burst: bool = False
    maintenance: bool = True
    parent_pid: int | None = None
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"


def with_pool_options(settings: Settings, options: LaunchOptions) -> Settings:
    """``settings`` with the pool options given on the command line (they win)."""
    given = {
        "pool": options.pool,
        "concurrency": options.concurrency,
        "max_runs": options.max_runs,
        "max_memory_mb": options.max_memory_mb,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    if not changes:
        return settings
    try:
        merged = settings.workers.model_validate(settings.workers.model_dump() | changes)
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(problems.replace("_", "-")) from None
    return settings.model_copy(update={"workers": merged})


def run(options: LaunchOptions) -> int:
    """Check the configuration and Redis, then run (``fanbot worker``, ``python -m workers``).

    Redis that does not answer yet is waited for, a line per attempt.

    Raises:
        ConfigError: The configuration is invalid (a ``middleware`` hook that cannot be
            imported too), or Redis refused its credentials.
    """
    settings = with_pool_options(load_settings(), options)
    check_hooks(settings)  # imported here once: every worker forked from this process has them
    configure_logging(settings)
    check_skills(settings)  # a broken skill stops start-up in one line (docs/skills.md)
    queues = [q for q in options.queues if q]
    if options.single or options.burst:
        run_single(settings, queues, burst=options.burst, parent_pid=options.parent_pid)
        return 0
    return run_pool(
        settings,
        count=max(1, options.count),
        queues=queues,
        maintenance=options.maintenance,
        parent_pid=options.parent_pid,
        metrics_port=options.metrics_port,
        metrics_host=options.metrics_host,
    )
