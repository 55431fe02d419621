"""The hog watch on real threads: a thread spinning in pure Python is flagged from its
/proc CPU time, a sleeping one beside it is not."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from bot.types import ThreadRef
from workers.hog_watch import HogLimits, HogWatch, Verdict, Watched

THREAD = ThreadRef(platform="console", account="local", chat="c1")


def spin(stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        n += 1


def test_only_the_spinning_thread_is_flagged() -> None:
    events: list[Any] = []
    deps: Any = SimpleNamespace(
        runs=SimpleNamespace(get=lambda run_id: SimpleNamespace(thread=THREAD)),
        progress=SimpleNamespace(put=events.append),
    )
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=(stop,), name="run-spinner", daemon=True)
    sleeper = threading.Thread(target=stop.wait, args=(30,), name="run-sleeper", daemon=True)
    spinner.start()
    sleeper.start()
    assert spinner.native_id is not None and sleeper.native_id is not None
    runs = [
        Watched(tid=spinner.native_id, job_id="spin", run_id="r-spin", ident=spinner.ident),
        Watched(tid=sleeper.native_id, job_id="sleep", run_id="r-sleep", ident=sleeper.ident),
    ]
    # A low share: on a loaded machine the spinner may get well under a core; the sleeper
    # uses next to none either way.
    watch = HogWatch(deps, limits=HogLimits(share=0.2, window=1.0, calm=0.05))
    found = []
    try:
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            found += watch.tick(runs)
            time.sleep(0.1)
    finally:
        stop.set()
        spinner.join(5)
        sleeper.join(5)
    assert [(f.run.job_id, f.verdict) for f in found] == [("spin", Verdict.HOGGING)]
    assert found[0].share >= 0.2
    assert [e.run_id for e in events] == ["r-spin"]
