"""The threads pool: one long-lived worker process runs many runs at once, each a
registered RQ execution (docs/architecture.md, "Worker pools").

A subagent run spends nearly all its life waiting for the model, so a process per run (the
fork pool, :class:`workers.launcher.FanbotWorker`) pays a fork and ~10 MB for work that
mostly waits. Here one process serves up to ``concurrency`` runs, each on a thread of its
own, sharing the process's HTTP client and Redis pool (its :class:`WorkerContext`).

What RQ sees is what it sees of a forking worker, once per run:

- **dequeue** is RQ's reliable one: ``BLMOVE`` from each queue into its intermediate list
  (one dequeuer thread per queue, each holding a free slot while it waits), so a process
  killed between the pop and the start leaves the job where the repair sweep
  (:mod:`workers.repair`) and RQ's maintenance find it;
- **each run** is an :class:`rq.executions.Execution` (started-job registry, the worker's
  ``executions`` set), created before its thread starts and deleted by RQ's own finalizers;
  the worker is ``busy`` while any run executes, ``idle`` when none does;
- **heartbeats** for the worker and every execution go in one pipeline (one round trip)
  every ``job_monitoring_interval``;
- **stop** (RQ's ``stop-job`` or ``stop-execution`` command, sent by
  :func:`bot.runs.stop.apply_stop`) aborts the run (:mod:`bot.supervise.abort`): its model
  response is cut, its sandbox command killed, its MCP call cancelled, and it ends
  ``stopped`` with its partial result. A run that has not ended
  ``workers.stop_grace_seconds`` after its stop is **fenced**: its job is ended ``stopped``
  here, its run finalized, and this process takes no more work, drains and exits, so the
  launcher replaces it (a thread cannot be killed; a process can).

``max_runs`` and ``max_memory_mb`` recycle the process the same graceful way. A run never
changes ``os.environ`` or the working directory: its identity travels in context variables
(the serving :class:`WorkerContext`, RQ's current job, the run's abort).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import psutil
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rq.command import handle_command, parse_payload
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.queue import Queue
from rq.timeouts import JobTimeoutException, TimerDeathPenalty
from rq.utils import now
from rq.worker.base import BaseWorker, WorkerStatus

from bot.agent.tools.extract import PARSERS
from bot.runs.stop import stop_run
from bot.supervise.abort import Abort, running
from workers.callbacks import fence_job
from workers.context import WorkerContext, serving
from workers.hog_watch import HogWatch

log = logging.getLogger("fanbot.worker")

DEQUEUE_BLOCK_SECONDS = 1
"""Each dequeuer's ``BLMOVE`` waits this long, then looks at whether to stop."""
SHORT_BLOCK_SECONDS = 0.2
"""... or this long while another dequeuer waits for the slot it holds (the last one free):
the queues take turns quickly then."""
CONTROL_TICK_SECONDS = 0.5
"""How often the control loop fences overdue stops and checks the recycle limits."""
MEMORY_CHECK_SECONDS = 5.0
DEADLINE_GRACE_SECONDS = 1.0
"""A run's own checkpoint gets this long past its soft deadline before the worker aborts it."""


class FairSlots:
    """A counting semaphore that serves its waiters first come, first served: a dequeuer
    that gives its slot back (its ``BLMOVE`` found nothing) waits behind the others, so
    with fewer slots than queues the queues take turns instead of one keeping the slot."""

    def __init__(self, count: int) -> None:
        self._lock = threading.Lock()
        self._free = count
        self._waiting: deque[threading.Event] = deque()

    def acquire(self, timeout: float) -> bool:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            turn = threading.Event()
            self._waiting.append(turn)
        if turn.wait(timeout):
            return True  # release() handed its slot to this waiter
        with self._lock:
            if turn.is_set():
                return True
            self._waiting.remove(turn)
            return False

    @property
    def contended(self) -> bool:
        """Whether someone waits for a slot now."""
        return bool(self._waiting)

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


@dataclass(eq=False)
class _Run:
    """One execution of this process."""

    job: Job
    queue: Queue
    execution: Any
    abort: Abort = field(default_factory=Abort)
    thread: threading.Thread | None = None
    stop_at: float | None = None
    """``time.monotonic()`` of the stop command (or the time limit), if one came."""
    fenced: bool = False


def _time_limit_for(worker: ThreadsWorker) -> type[TimerDeathPenalty]:
    """RQ's hard job time limit for runs on threads. SIGALRM reaches only the main thread,
    so the limit raises in the run's thread (RQ's timer death penalty, which reaches Python
    code only) and aborts the run, which cuts its blocking calls; a run that still has not
    ended ``stop_grace`` later is fenced ``timeout`` like an overdue stop."""

    class RunTimeLimit(TimerDeathPenalty):
        def __init__(self, timeout: Any, exception: Any = JobTimeoutException, **kwargs: Any):
            super().__init__(timeout, exception, **kwargs)  # type: ignore[no-untyped-call]
            self._job_id = str(kwargs.get("job_id") or "")

        def handle_death_penalty(self) -> None:
            if self._job_id:
                worker.time_limit_reached(self._job_id)
            super().handle_death_penalty()  # type: ignore[no-untyped-call]

    return RunTimeLimit


class ThreadsWorker(BaseWorker):
    """An RQ worker that runs up to ``concurrency`` jobs at once on threads (see the module
    docstring). ``work()`` returns when told to stop, when the queues are empty in burst
    mode, or when the process should be recycled (``recycle_reason`` says why)."""

    def __init__(
        self,
        *args: Any,
        context: WorkerContext,
        concurrency: int,
        stop_grace: float,
        max_runs: int = 0,
        max_memory_mb: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.death_penalty_class = _time_limit_for(self)
        self.context = context
        self._hogs = HogWatch(context.deps)
        self.concurrency = concurrency
        self.stop_grace = stop_grace
        self.max_runs = max_runs
        self.max_memory_mb = max_memory_mb
        self.recycle_reason = ""
        self.runs_started = 0
        self._slots = FairSlots(concurrency)
        self._lock = threading.Lock()
        self._running: dict[str, _Run] = {}
        self._no_more = threading.Event()
        """Set: the dequeuers stop taking work (shutdown, recycle, fence)."""
        self._cold = threading.Event()
        self._shutdown_at: float | None = None
        self._memory_checked = 0.0

    # --- the loop -------------------------------------------------------------------------

    def work(  # type: ignore[override]
        self, burst: bool = False, logging_level: str | None = "INFO", **_: Any
    ) -> bool:
        """Run until stopped (see the class docstring); True if any job ran."""
        self.bootstrap(logging_level, DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT)
        self._install_signal_handlers()  # type: ignore[no-untyped-call]
        self.set_state(WorkerStatus.IDLE)
        dequeuers = [
            threading.Thread(
                target=self._dequeue_loop, args=(q, burst), name=f"dequeue-{q.name}", daemon=True
            )
            for q in self.queues
        ]
        for thread in dequeuers:
            thread.start()
        next_beat = time.monotonic() + self.job_monitoring_interval
        try:
            while not self._cold.is_set():
                time.sleep(CONTROL_TICK_SECONDS)
                if time.monotonic() >= next_beat:
                    self.heartbeat_all()
                    next_beat = time.monotonic() + self.job_monitoring_interval
                self._abort_past_deadline()
                self._fence_overdue()
                self._hogs.tick_runs(self._running_runs())  # a run that holds the process
                self._check_recycle()
                self._stop_after_shutdown_grace()
                taking = any(t.is_alive() for t in dequeuers)  # each ends within a second
                if not taking and not self._running_runs():
                    break
        finally:
            self._no_more.set()
            self._abort_all("the worker stopped")
            PARSERS.shutdown()  # its helper processes (forked workers end in os._exit)
            for thread in dequeuers:
                thread.join(DEQUEUE_BLOCK_SECONDS + 2)
            self.teardown()  # type: ignore[no-untyped-call]
        return self.runs_started > 0

    def _dequeue_loop(self, queue: Queue, burst: bool) -> None:
        """Take jobs from ``queue`` while there is a free slot (see the module docstring)."""
        wait = 1.0
        while not self._no_more.is_set():
            if not self._slots.acquire(timeout=CONTROL_TICK_SECONDS):
                continue
            if not self._reserve():
                self._slots.release()
                return
            try:
                found = self._pop(queue, burst)
                wait = 1.0
            except (RedisConnectionError, RedisTimeoutError) as exc:
                self._unreserve()
                self._slots.release()
                log.error("cannot reach Redis (%s); retrying in %.0f s", exc, wait)
                time.sleep(wait)
                wait = min(wait * 2, 30.0)
                continue
            except Exception:
                self._unreserve()
                self._slots.release()
                log.exception("dequeue from %s failed", queue.name)
                time.sleep(1.0)
                continue
            if found is None:
                self._unreserve()
                self._slots.release()
                if burst:
                    return
                continue
            if self._no_more.is_set():  # popped while draining: another process takes it
                self._give_back(*found)
                self._unreserve()
                self._slots.release()
                return
            try:
                self._start(*found)
            except Exception:
                self._slots.release()
                log.exception("could not start job %s", found[0].id)

    def _reserve(self) -> bool:
        """Count a run about to be taken; False once ``max_runs`` are (recycle)."""
        with self._lock:
            if self.max_runs and self.runs_started >= self.max_runs:
                return False
            self.runs_started += 1
            return True

    def _unreserve(self) -> None:
        with self._lock:
            self.runs_started -= 1

    def _pop(self, queue: Queue, burst: bool) -> tuple[Job, Queue] | None:
        """One job from ``queue`` through its intermediate list, or None."""
        try:
            block = SHORT_BLOCK_SECONDS if self._slots.contended else DEQUEUE_BLOCK_SECONDS
            popped = self.queue_class.lmove(
                self.connection,
                queue.key,
                None if burst else block,  # type: ignore[arg-type]
            )
        except DequeueTimeout:
            return None
        if popped is None:
            return None
        queue_key, job_id = popped
        job_id = job_id.decode() if isinstance(job_id, bytes) else str(job_id)
        return self.queue_class._fetch_dequeued_job(
            self.connection,
            queue_key,
            job_id,
            job_class=self.job_class,
            serializer=self.serializer,
            death_penalty_class=self.death_penalty_class,
        )

    def _give_back(self, job: Job, queue: Queue) -> None:
        """Put a popped job back at the head of its queue, out of the intermediate list."""
        with self.connection.pipeline() as pipe:
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)
            pipe.lpush(queue.key, job.id)
            pipe.execute()

    def _start(self, job: Job, queue: Queue) -> None:
        """Register ``job``'s execution (the worker goes busy) and start its thread."""
        job.redis_server_version = self.get_redis_server_version()  # type: ignore[no-untyped-call]
        log.info("%s: %s (%s)", queue.name, job.func_name, job.id)
        with self._lock:  # busy/idle decided under the lock: see _ended
            execution = self.prepare_execution(job)
            run = _Run(job=job, queue=queue, execution=execution)
            self._running[job.id] = run
        run.thread = threading.Thread(
            target=self._perform, args=(run,), name=f"run-{job.id[:12]}", daemon=True
        )
        run.thread.start()

    def _perform(self, run: _Run) -> None:
        try:
            with serving(self.context), running(run.abort):
                self.perform_job(run.job, run.queue, run.execution)
        except BaseException:
            log.exception("job %s: the worker's bookkeeping failed", run.job.id)
        finally:
            self._ended(run)

    def _ended(self, run: _Run) -> None:
        with self._lock:
            if self._running.get(run.job.id) is run:
                del self._running[run.job.id]
                self._slots.release()
            idle = not self._running
            if idle:
                self.set_state(WorkerStatus.IDLE)

    def _running_runs(self) -> list[_Run]:
        with self._lock:
            return list(self._running.values())

    # --- RQ's hooks -----------------------------------------------------------------------

    def _set_connection(self, connection: Any) -> Any:
        # RQ raises the pool's socket timeout past its long blocking dequeue; this worker's
        # BLMOVEs wait a second, and the pool is the runs' own: their timeouts stay.
        return connection

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        # Always popped through the intermediate list here, whatever the number of queues.
        super().prepare_job_execution(job, remove_from_intermediate_queue=True)

    def procline(self, message: str) -> None:
        return None  # one title for many runs would say nothing true

    def execute_job(self, job: Job, queue: Queue) -> None:
        raise NotImplementedError("the threads pool starts jobs in _start")

    def handle_job_failure(self, job: Job, queue: Queue, started_job_registry: Any = None,
                           exc_string: str = "", execution: Any = None) -> None:  # fmt: skip
        run = self._running.get(job.id)
        if run is not None and run.fenced:
            return  # ended by the fence already
        with self._lock:  # RQ keeps one "stopped job" per worker: set it for this job
            self._stopped_job_id = job.id if run is not None and run.abort.aborted else None
            super().handle_job_failure(job, queue, started_job_registry, exc_string, execution)

    def handle_job_success(self, job: Job, queue: Queue, started_job_registry: Any,
                           execution: Any) -> None:  # fmt: skip
        run = self._running.get(job.id)
        if run is not None and run.fenced:
            return
        super().handle_job_success(job, queue, started_job_registry, execution)

    def heartbeat_all(self) -> None:
        """The worker's heartbeat and every execution's, in one round trip."""
        runs = self._running_runs()
        ttl = self.job_monitoring_interval + 60
        with self.connection.pipeline() as pipe:
            self.heartbeat(ttl, pipeline=pipe)
            for run in runs:
                if run.fenced:
                    continue
                run.execution.heartbeat(run.job.started_job_registry, ttl, pipeline=pipe)
                run.job.heartbeat(now(), ttl, pipeline=pipe, xx=True)
            try:
                pipe.execute()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                log.warning("heartbeat failed: %s", exc)

    # --- stop -----------------------------------------------------------------------------

    def handle_payload(self, message: Any) -> None:
        """RQ's commands over pub/sub; a stop aborts the run it names."""
        payload = parse_payload(message)
        command = payload.get("command")
        if command == "stop-job":
            self.abort_job(str(payload.get("job_id", "")), "stopped on request")
        elif command == "stop-execution":
            wanted = str(payload.get("execution_id", ""))
            for run in self._running_runs():
                if run.execution.id == wanted:
                    self.abort_job(run.job.id, "stopped on request")
        elif command == "kill-horse":
            self._abort_all("stopped on request")
        else:
            handle_command(self, payload)

    def time_limit_reached(self, job_id: str) -> None:
        """RQ's hard time limit of ``job_id`` passed (see :func:`_time_limit_for`)."""
        self.abort_job(job_id, "job time limit reached (hard limit)", timed_out=True)

    def abort_job(self, job_id: str, reason: str, *, timed_out: bool = False) -> bool:
        """Abort the run executing ``job_id`` here; False if none does."""
        run = self._running.get(job_id)
        if run is None:
            log.warning("not running job %s here; stop ignored", job_id)
            return False
        if run.stop_at is None:
            run.stop_at = time.monotonic()
        cut = run.abort.abort(reason, timed_out=timed_out)
        log.info("job %s: %s (%d blocking call(s) cut)", job_id, reason, cut)
        return True

    def _abort_all(self, reason: str) -> None:
        for run in self._running_runs():
            self.abort_job(run.job.id, reason)

    def _abort_past_deadline(self) -> None:
        """Abort the runs still going :data:`DEADLINE_GRACE_SECONDS` past their own soft
        deadline: blocked where no checkpoint of theirs comes (a compiled runnable that never
        yields), so they end ``timeout`` (or are fenced so)."""
        now = time.monotonic()
        for run in self._running_runs():
            deadline = run.abort.deadline
            if deadline is None or run.abort.aborted or now < deadline + DEADLINE_GRACE_SECONDS:
                continue
            if run.stop_at is None:
                run.stop_at = now
            run.abort.abort(run.abort.deadline_reason, past_deadline=True)
            log.info("job %s: %s", run.job.id, run.abort.deadline_reason)

    def _fence_overdue(self) -> None:
        """End, here, the jobs of runs still going ``stop_grace`` after their stop."""
        for run in self._running_runs():
            if run.fenced or run.stop_at is None:
                continue
            if time.monotonic() - run.stop_at < self.stop_grace:
                continue
            run.fenced = True
            log.warning(
                "job %s did not end %.0f s after its stop; fenced, and this process drains "
                "and is replaced",
                run.job.id,
                self.stop_grace,
            )
            try:
                fence_job(self, run.job, run.execution, self.context.deps, abort=run.abort)
            except Exception:
                log.exception("could not fence job %s", run.job.id)
            with self._lock:
                if self._running.get(run.job.id) is run:
                    del self._running[run.job.id]
            self._recycle(f"job {run.job.id} did not end after its stop")

    # --- shutdown and recycling -----------------------------------------------------------

    def request_stop(self, signum: Any, frame: Any) -> None:
        """SIGTERM/SIGINT: take no more work, let the runs finish (warm shutdown); a second
        signal aborts them all."""
        if self._shutdown_at is not None:
            log.warning("second signal: stopping every run now")
            self._cold.set()
            return
        self._shutdown_at = time.monotonic()
        self._shutdown_requested_date = now()
        log.info("warm shutdown: %d run(s) may finish", len(self._running_runs()))
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)
        self._no_more.set()

    def _stop_after_shutdown_grace(self) -> None:
        """Runs still going ``subagents.shutdown_grace_seconds`` after a SIGTERM are stopped
        cleanly (``stopped``, partial result, a note naming the shutdown)."""
        if self._shutdown_at is None:
            return
        deps = self.context.deps
        if time.monotonic() - self._shutdown_at < deps.settings.subagents.shutdown_grace_seconds:
            return
        for run in self._running_runs():
            if run.stop_at is not None:
                continue
            run_id = deps.jobs.current_run_id(run.job)
            if run_id is not None:
                try:
                    stop_run(deps, run_id, by="a worker shutdown")
                except Exception:
                    log.exception("could not stop run %s at shutdown", run_id)
            self.abort_job(run.job.id, "stopped by a worker shutdown")

    def _check_recycle(self) -> None:
        if self.max_runs and self.runs_started >= self.max_runs:
            self._recycle(f"{self.runs_started} runs started (max {self.max_runs})")
        if not self.max_memory_mb or time.monotonic() - self._memory_checked < MEMORY_CHECK_SECONDS:
            return
        self._memory_checked = time.monotonic()
        uss = psutil.Process(os.getpid()).memory_full_info().uss >> 20
        if uss > self.max_memory_mb:
            self._recycle(f"memory {uss} MB (max {self.max_memory_mb} MB)")

    def _recycle(self, reason: str) -> None:
        if self._no_more.is_set():
            return
        self.recycle_reason = reason
        log.info("recycling this worker process: %s; draining %d run(s)", reason,
                 len(self._running_runs()))  # fmt: skip
        self._no_more.set()
