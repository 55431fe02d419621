"""Worker processes forked from the warmed launcher, so they share its memory.

The launcher imports and builds everything a job needs once (:func:`workers.jobs.warm_up`),
then forks each RQ worker from itself: the workers' (and their work horses') pages stay
shared with the launcher's copy-on-write, and PSS divides them between the processes
instead of every worker holding a copy of its own. ``gc.freeze()`` right before each fork
keeps the collector from writing into the inherited objects (a write would copy the page).

:class:`Forked` is the slice of :class:`subprocess.Popen` the launcher's supervision uses
(``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``, ``returncode``), so a forked
worker is watched, restarted and stopped exactly like an exec'd one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable

_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


class Forked:
    """A worker process forked from this one."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reaping = threading.Lock()  # the metrics thread polls too

    def poll(self) -> int | None:
        """The exit code once it ended (``-N`` for signal ``N``), else None; reaps it."""
        with self._reaping:
            if self.returncode is not None:
                return self.returncode
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it is gone, how is unknown
                self.returncode = 255
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code.

        Raises:
            subprocess.TimeoutExpired: Still running after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker pid {self.pid}", timeout or 0.0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(body: Callable[[], int], *, close: list[socket.socket]) -> Forked:
    """Fork a process that runs ``body`` and exits with its code; never returns in it.

    ``close`` are listening sockets of this process that the worker must not hold open.
    The worker gets a session of its own: RQ kills a horse with ``killpg(getpgid(horse))``;
    if that races the horse's own ``setpgrp``, the group killed is the worker's, and it
    must not be the launcher's.
    """
    # Blocked across the fork: a SIGTERM sent to the new worker before it restored the
    # default handler would otherwise run the launcher's handler there, and be lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    handlers = _handlers()
    for handler in handlers:
        # A restart forks while the launcher's threads run: with every handler held, none
        # of them is half-way through a write whose stream lock the worker would inherit
        # taken (logging itself re-creates the handlers' locks in the child).
        handler.acquire()
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # else what is buffered now is written twice
        gc.freeze()  # what exists now is shared; no collection in either process touches it
        pid = os.fork()
    except BaseException:
        _release(handlers)
        raise
    if pid == 0:
        os._exit(_child(body, close))  # pragma: no cover  (runs in the forked process)
    _release(handlers)
    return Forked(pid)


def _release(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        handler.release()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _handlers() -> list[logging.Handler]:
    """Every handler of every logger, each once."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    found: dict[int, logging.Handler] = {}
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):  # placeholders have none
            found.setdefault(id(handler), handler)
    return list(found.values())


def _child(body: Callable[[], int], close: list[socket.socket]) -> int:  # pragma: no cover
    code = 1
    try:
        os.setsid()
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)  # the launcher's handlers only set its event
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # one sent already: dies
        for sock in close:
            sock.close()
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    return code
