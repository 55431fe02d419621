"""The console's worker processes, and its Ctrl-C presses.

The workers run under one launcher (``python -m workers``), but each worker sits in a
session of its own (see :mod:`workers.launcher`) and forks work horses, so signalling the
launcher's process group does not reach them all, and a worker whose parent died is
reparented away from the console. :class:`WorkerGroup` therefore remembers every process
of the tree it has seen and, when the launcher does not bring them down in time, kills
each one itself: no process outlives the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import psutil

log = logging.getLogger(__name__)

POLL = 0.05
CTRL_C = "Ctrl-C in the console"
SIGNAL_CAUSES: Mapping[signal.Signals, str] = MappingProxyType(
    {
        signal.SIGINT: CTRL_C,
        signal.SIGTERM: "the console's shutdown (SIGTERM)",
        signal.SIGHUP: "the console's terminal closing",
    }
)
"""How a stop note names each signal that stops the console."""


class WorkerGroup:
    """The launcher and its workers and horses.

    Args:
        launcher: The ``python -m workers`` process.
    """

    def __init__(self, launcher: subprocess.Popen[bytes]) -> None:
        self.launcher = launcher
        self._seen: dict[int, psutil.Process] = {}

    @classmethod
    def start(cls, env: dict[str, str], *, count: int, log_path: Path) -> WorkerGroup:
        """Start ``count`` workers; they exit on their own if this process dies."""
        command = [sys.executable, "-m", "workers", "--count", str(count)]
        command += ["--parent-pid", str(os.getpid())]
        with log_path.open("ab") as log_file:
            launcher = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,  # the terminal is the prompt's alone
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C reaches the console only; it stops them
            )
        return cls(launcher)

    def remember(self) -> None:
        """Note every process of the tree now (a later orphan is found by this list)."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.launcher.pid)
            for proc in [root, *root.children(recursive=True)]:
                self._seen.setdefault(proc.pid, proc)

    def alive(self) -> list[psutil.Process]:
        return [p for p in self._seen.values() if _running(p)]

    def terminate(self) -> None:
        """Ask for a warm shutdown: the launcher relays SIGTERM to each worker, and a
        worker exits once its horse is done (the console hard-stopped their jobs)."""
        self.remember()
        if self.launcher.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.launcher.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the whole tree to exit; True if it did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.launcher.poll() is None or self.alive():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(POLL)
        return True

    def kill(self) -> None:
        """SIGKILL every process of the tree still running."""
        self.remember()
        for proc in self.alive():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.launcher.wait(5)

    async def stop(self, *, grace: float, force: asyncio.Event) -> bool:
        """Warm shutdown for up to ``grace`` s (cut short by ``force``), then kill what is
        left. Returns True when nothing had to be killed."""
        self.terminate()
        waiter = asyncio.create_task(self.wait(grace))
        forced = asyncio.create_task(force.wait())
        await asyncio.wait([waiter, forced], return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        clean = waiter.done() and waiter.result()
        waiter.cancel()
        if not clean:
            left = [p.pid for p in self.alive()]
            log.warning("workers still running after the grace (%s); killing them", left)
            self.kill()
        return clean


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class Interrupts:
    """Counts Ctrl-C presses (and SIGTERM, and SIGHUP from a closed terminal): the first
    asks for a clean stop, the next one forces it.

    Args:
        on_press: Called after each press with the number of presses so far.
    """

    def __init__(self, on_press: Callable[[int], None] | None = None) -> None:
        self.first = asyncio.Event()
        self.second = asyncio.Event()
        self.on_press = on_press
        self.cause = CTRL_C
        """What the first press was, in words ("Ctrl-C in the console")."""
        self._presses = 0

    def press(self, cause: str = CTRL_C) -> None:
        self._presses += 1
        if self._presses == 1:
            self.cause = cause
        (self.second if self.first.is_set() else self.first).set()
        if self.on_press is not None:
            self.on_press(self._presses)

    def install(self) -> None:
        """Handle the signals in the running loop (not as KeyboardInterrupt, which would
        cancel whatever the loop was doing mid-way, nor by dying at once: Redis and the
        workers run in sessions of their own and would be left behind)."""
        loop = asyncio.get_running_loop()
        for sig, cause in SIGNAL_CAUSES.items():
            loop.add_signal_handler(sig, self.press, cause)

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in SIGNAL_CAUSES:
            loop.remove_signal_handler(sig)
