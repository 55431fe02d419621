"""Aborting one run from outside its thread (docs/architecture.md, "Worker pools").

In the threads pool many runs share a process, so a stop cannot kill a process: it aborts
the run. Each run executes with its own :class:`Abort` as the *current* one (a context
variable, so two runs on two threads each see their own). Whatever blocks on the run's
behalf registers how to cut it short for the time it blocks (:meth:`Abort.closing`): the
model call closes its response, the sandbox kills its process group, an MCP call cancels
its future. :meth:`Abort.abort` (the worker's control thread, on a stop command) sets the
flag and calls every registered closer; the run's next checkpoint sees the flag.

Outside a threads-pool run there is no current abort and every helper here is a no-op.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

Closer = Callable[[], object]

_current: ContextVar[Abort | None] = ContextVar("fanbot_abort", default=None)


class Aborted(Exception):
    """The run was aborted (a stop) while it waited; it ends ``stopped``."""


class Abort:
    """The abort flag of one run and the closers of what it blocks on right now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._closers: dict[int, Closer] = {}
        self._next = 0
        self.reason = ""
        self.timed_out = False
        """Aborted by the job's hard time limit rather than a stop."""
        self.past_deadline = False
        """Aborted at the run's own (soft) deadline, which it did not reach a checkpoint at."""
        self.deadline: float | None = None
        """``time.monotonic()`` of the run's soft deadline, where it has one: the threads
        pool aborts a run still going a moment past it (one blocked where no checkpoint
        comes), with :attr:`deadline_reason`."""
        self.deadline_reason = "run timeout reached"
        self.partial: Callable[[], dict[str, Any]] = dict
        """What the run has done so far (its finalize's keyword arguments: result, usage,
        tools), for whoever ends it from outside when it cannot (a fence)."""

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` was called."""
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once on an abort; True if aborted."""
        return self._event.wait(timeout)

    def abort(self, reason: str, *, timed_out: bool = False, past_deadline: bool = False) -> int:
        """Set the flag and cut short what the run blocks on; returns the closers called.
        ``timed_out``: the job's hard time limit, not a stop, ends the run;
        ``past_deadline``: the run's own deadline does."""
        with self._lock:
            if self._event.is_set():
                return 0
            self.reason = reason
            self.timed_out = timed_out
            self.past_deadline = past_deadline
            self._event.set()
            closers = list(self._closers.values())
            self._closers.clear()
        for close in closers:
            try:
                close()
            except Exception:  # one closer failing must not keep the others from running
                log.debug("an abort closer failed", exc_info=True)
        return len(closers)

    def check(self) -> None:
        """Raise :class:`Aborted` if the run was aborted."""
        if self._event.is_set():
            raise Aborted(self.reason or "aborted")

    @contextlib.contextmanager
    def closing(self, close: Closer) -> Iterator[None]:
        """Call ``close`` if the run is aborted while the block runs (at once if it was)."""
        with self._lock:
            aborted = self._event.is_set()
            key = self._next
            self._next += 1
            if not aborted:
                self._closers[key] = close
        if aborted:
            close()
        try:
            yield
        finally:
            with self._lock:
                self._closers.pop(key, None)


def current() -> Abort | None:
    """The abort of the run executing in this thread, if a threads-pool worker set one."""
    return _current.get()


@contextlib.contextmanager
def running(abort: Abort) -> Iterator[Abort]:
    """Make ``abort`` the current one for the block (a run's whole execution)."""
    token = _current.set(abort)
    try:
        yield abort
    finally:
        _current.reset(token)


@contextlib.contextmanager
def closing(close: Closer) -> Iterator[None]:
    """:meth:`Abort.closing` on the current abort; nothing outside a threads-pool run."""
    abort = _current.get()
    if abort is None:
        yield
        return
    with abort.closing(close):
        yield


def aborted() -> bool:
    """Whether the current run (if any) was aborted."""
    abort = _current.get()
    return abort is not None and abort.aborted


def check() -> None:
    """Raise :class:`Aborted` if the current run (if any) was aborted."""
    abort = _current.get()
    if abort is not None:
        abort.check()


@contextlib.contextmanager
def interrupting() -> Iterator[None]:
    """While the block runs, an abort of the current run raises :class:`Aborted` in this
    thread (asynchronously: at its next Python bytecode, so not inside a blocking C call,
    where only the fence of :mod:`workers.threaded` helps). For code that neither yields
    nor blocks on anything a closer could cut: a compiled runnable run in its run's thread.
    Nothing outside a threads-pool run."""
    mine = _current.get()
    if mine is None:
        yield
        return
    target = threading.get_ident()
    guard = threading.Lock()
    inside = [True]

    def interrupt() -> None:
        with guard:
            if inside[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(target), ctypes.py_object(Aborted)
                )

    try:
        with mine.closing(interrupt):
            yield
    finally:
        with guard:
            inside[0] = False
