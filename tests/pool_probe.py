"""Functions the helper-process tests send to a :class:`bot.supervise.procpool.ProcessPool`.

A module of its own, importing nothing: the helper imports it to run them, and the tests
look at what else the helper imported.
"""

from __future__ import annotations

import os
import sys
import time


def state() -> tuple[int, list[str]]:
    """The helper's pid and the modules it has imported."""
    return os.getpid(), sorted(sys.modules)


def nap(seconds: float) -> int:
    """Sleep, then the helper's pid."""
    time.sleep(seconds)
    return os.getpid()


def spin(seconds: float) -> int:
    """Burn a core for ``seconds``, then the helper's pid."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass
    return os.getpid()
