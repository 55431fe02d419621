"""Stop requests by signal, for the commands that run until told to stop."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["stop_on_signal"]


@contextlib.contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event SIGTERM/SIGINT set while inside (the previous handlers come back after).

    Only the main thread may install handlers; the event can be waited on from any."""
    stopping = threading.Event()
    sigs = (signal.SIGTERM, signal.SIGINT)
    previous = [signal.signal(sig, lambda *_: stopping.set()) for sig in sigs]
    try:
        yield stopping
    finally:
        for sig, handler in zip(sigs, previous, strict=True):
            signal.signal(sig, handler)
