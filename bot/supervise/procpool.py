"""A few helper processes for CPU-heavy pure functions (docs/architecture.md, "Worker pools").

In the threads pool many runs share a worker process and its GIL: one run parsing a big
page or PDF in pure Python makes every other run of the process wait. :class:`ProcessPool`
runs such a function in a helper process instead (a :class:`ProcessPoolExecutor`, two
processes by default), so the run's thread only waits, without the GIL.

- **Lazy**: no process exists until the first call; the pool lives as long as the process
  that made it (a process forked from it starts without one), and ends at exit.
- **spawn**, never fork: the worker process has threads, and a forked child would inherit
  their locks in whatever state they were. A spawned helper imports only the module of the
  function it runs (and, as Python does for every spawned child, the parent's ``__main__``
  script: ``fanbot``'s console script imports nothing heavy for that reason).
- **Every call is bounded**: past ``timeout`` the caller gets :class:`HelperFailed` and the
  helper processes are killed (a running call cannot be cut any other way); so are they
  when the calling run is aborted (:mod:`bot.supervise.abort`) while its call runs. Other
  calls that were running in the killed processes are made once more in the new ones.
- **A helper that dies** (killed, out of memory, a crash in a C parser) gives its caller
  :class:`HelperFailed` saying so; the next call gets new processes.
- **A helper never outlives its parent**: a worker ends with ``os._exit``, which runs no
  ``atexit``, so each helper watches its parent and exits when it is gone.

The functions sent must be importable by name (module-level, or a :func:`functools.partial`
of one) and take and return what pickles.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from bot.errors import FanbotError
from bot.supervise import abort

log = logging.getLogger(__name__)

T = TypeVar("T")

PARENT_CHECK_SECONDS = 5.0
"""How often a helper looks whether its parent is still there (it wakes at once when the
parent goes; this bounds only the wait itself)."""
SHUTDOWN_SECONDS = 2.0
"""How long :meth:`ProcessPool.shutdown` lets busy helpers finish before killing them."""


class HelperFailed(FanbotError):
    """A call in a helper process gave no result: it took too long or its process died."""


def exit_with_parent() -> None:
    """A helper's initializer: end this process when its parent is gone (see the module
    docstring)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    threading.Thread(
        target=_exit_when_gone, args=(parent,), name="parent-watch", daemon=True
    ).start()


def _exit_when_gone(parent: BaseProcess) -> None:
    while True:
        parent.join(PARENT_CHECK_SECONDS)  # returns as soon as the parent is gone
        if not parent.is_alive():
            os._exit(0)


@dataclass(eq=False)
class _Pool:
    executor: ProcessPoolExecutor
    killed: str = ""
    """Why this pool was killed on purpose ("": it was not)."""


class ProcessPool:
    """Up to ``processes`` helper processes of this process (see the module docstring).

    Args:
        name: What the helpers do, for the log ("page parser").
        processes: At most this many helpers (each started on demand).
    """

    def __init__(self, *, name: str, processes: int = 2) -> None:
        self.name = name
        self.processes = processes
        self._lock = threading.Lock()
        self._pool: _Pool | None = None
        self._exit_hooked = False
        me = weakref.ref(self)

        def forget() -> None:  # in a forked child: the parent's pool is not ours
            pool = me()
            if pool is not None:
                pool._lock = threading.Lock()
                pool._pool = None

        os.register_at_fork(after_in_child=forget)

    def call(self, work: Callable[[], T], *, timeout: float) -> T:
        """``work()`` in a helper process, its result or its exception.

        Raises:
            HelperFailed: It took longer than ``timeout`` seconds, or its process died.
            bot.supervise.abort.Aborted: The calling run was aborted meanwhile.
        """
        for attempt in (1, 2):
            abort.check()
            pool = self._current()
            try:
                future = pool.executor.submit(work)
            except (BrokenProcessPool, RuntimeError):  # broken or shut down meanwhile
                self._drop(pool)
                if attempt == 1:
                    continue
                raise HelperFailed(f"the {self.name} could not start a process") from None
            try:
                return self._wait(pool, future, timeout)
            except BrokenProcessPool:
                self._drop(pool)
                if pool.killed and attempt == 1:
                    continue  # killed for another call's sake: once more, in new helpers
                raise HelperFailed(
                    f"the {self.name}'s process died before it finished (killed, out of "
                    "memory or crashed)"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, pool: _Pool, future: Future[T], timeout: float) -> T:
        woke = threading.Event()
        future.add_done_callback(lambda _: woke.set())
        with abort.closing(woke.set):
            woke.wait(timeout)
        if future.done():
            try:
                return future.result(timeout=0)
            except CancelledError:
                if pool.killed:  # cancelled as its pool was killed for another call
                    raise BrokenProcessPool(pool.killed) from None
                raise HelperFailed(f"the {self.name} was shut down") from None
        if future.cancel():  # it had not started
            abort.check()
            raise HelperFailed(f"no {self.name} process was free for {timeout:g}s")
        # running: only killing its process ends it
        why = "its caller was stopped" if abort.aborted() else f"a call ran over {timeout:g}s"
        self._kill(pool, why)
        abort.check()
        raise HelperFailed(f"the {self.name} took longer than {timeout:g}s and was cut off")

    def _current(self) -> _Pool:
        with self._lock:
            if self._pool is None:
                executor = ProcessPoolExecutor(
                    self.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=exit_with_parent,
                )
                self._pool = _Pool(executor=executor)
                if not self._exit_hooked:
                    self._exit_hooked = True
                    atexit.register(self.shutdown)
            return self._pool

    def _drop(self, pool: _Pool) -> None:
        """Forget ``pool`` (broken): the next call makes a new one."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.executor.shutdown(wait=False, cancel_futures=True)

    def _kill(self, pool: _Pool, why: str) -> None:
        with self._lock:
            if pool.killed:
                return
            pool.killed = why
            if self._pool is pool:
                self._pool = None
        log.warning("%s: killing its helper processes (%s)", self.name, why)
        for process in _processes(pool.executor):
            process.kill()
        pool.executor.shutdown(wait=False, cancel_futures=True)

    def pids(self) -> list[int]:
        """The helper processes now (none before the first call)."""
        with self._lock:
            pool = self._pool
        return [] if pool is None else [p.pid for p in _processes(pool.executor) if p.pid]

    def shutdown(self) -> None:
        """End the helpers: idle ones at once, busy ones after :data:`SHUTDOWN_SECONDS`."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = _processes(pool.executor)
        pool.executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)
        # Its thread now ends at once; waiting for it releases the queues' semaphores, which
        # the resource tracker would otherwise report as leaked when this process ends.
        closer = threading.Thread(target=pool.executor.shutdown, name="pool-close", daemon=True)
        closer.start()
        closer.join(1.0)


def _processes(executor: ProcessPoolExecutor) -> list[BaseProcess]:
    """The executor's processes (it keeps them in ``_processes``; it has no public way to
    kill them before Python 3.14)."""
    found: Mapping[int, Any] | None = getattr(executor, "_processes", None)
    return list((found or {}).values())
