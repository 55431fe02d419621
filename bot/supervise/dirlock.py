"""An exclusive, advisory lock on a directory, held for a process's lifetime.

``flock`` on a lock file inside the directory: the kernel drops it when the holder exits,
however it exits (a SIGKILL included), so a stale lock never needs cleaning up. The
holder's pid is written into the file, so the one that is refused can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from bot.errors import DirectoryBusy


class DirLock:
    """Hold ``<directory>/<name>`` exclusively.

    Args:
        path: The lock file (its directory is created if missing).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DirLock:
        """Take the lock (a no-op when this object holds it already).

        Raises:
            DirectoryBusy: Another process holds it; ``pid`` says which, when known.
        """
        if self._fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryBusy(self.path.parent, pid=self.holder()) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def holder(self) -> int | None:
        """The pid written by the process that holds (or last held) the lock."""
        try:
            return int(self.path.read_text().strip() or "x")
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.release()
