"""The hog watch's decision (made-up CPU samples) and its reports (fake deps)."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from bot.types import ThreadRef
from workers.hog_watch import (
    HogJudge,
    HogLimits,
    HogWatch,
    ThreadCpu,
    Verdict,
    Watched,
    cpu_seconds,
    hog_text,
    where,
)

LIMITS = HogLimits(share=0.8, window=10.0, calm=0.5)
SPIN = Watched(tid=11, job_id="job-spin", run_id="run-spin")
IDLE = Watched(tid=12, job_id="job-idle")
THREAD = ThreadRef(platform="console", account="local", chat="c1")


def feed(judge: HogJudge, rates: dict[Watched, float], *, start: float, until: float,
         used: dict[Watched, float]) -> list[tuple[float, Watched, Verdict]]:  # fmt: skip
    """Tick every 0.5 s from ``start`` to ``until``, each run using ``rate`` CPU s/s."""
    seen = []
    now = start
    while now <= until + 1e-9:
        for run, rate in rates.items():
            used[run] = used.get(run, 0.0) + rate * 0.5
        seen += [(now, f.run, f.verdict) for f in judge.observe(now, dict(used))]
        now += 0.5
    return seen


def test_a_run_over_the_share_for_a_window_is_flagged_once_until_it_calms_down() -> None:
    judge, used = HogJudge(LIMITS), {}
    assert feed(judge, {SPIN: 0.95, IDLE: 0.02}, start=0, until=9.5, used=used) == []
    seen = feed(judge, {SPIN: 0.95, IDLE: 0.02}, start=10, until=30, used=used)
    assert seen == [(10, SPIN, Verdict.HOGGING)]  # once, however long it goes on
    seen = feed(judge, {SPIN: 0.1, IDLE: 0.02}, start=30.5, until=45, used=used)
    assert [(r, v) for _, r, v in seen] == [(SPIN, Verdict.CALM)]
    assert 35 <= seen[0][0] <= 37  # once the window's share fell under 50 %
    seen = feed(judge, {SPIN: 1.0}, start=45.5, until=60, used=used)
    assert [(r, v) for _, r, v in seen] == [(SPIN, Verdict.HOGGING)]  # again: it had calmed


def test_share_and_span_are_measured_over_the_window() -> None:
    judge = HogJudge(LIMITS)
    assert judge.observe(0.0, {SPIN: 100.0}) == []
    assert judge.observe(5.0, {SPIN: 104.0}) == []  # half a window: no verdict yet
    (found,) = judge.observe(12.0, {SPIN: 110.0})
    assert found.span == 12.0 and found.share == pytest.approx(10 / 12)


def test_under_the_share_or_between_share_and_calm_nothing_changes() -> None:
    judge, used = HogJudge(LIMITS), {}
    assert feed(judge, {SPIN: 0.75}, start=0, until=60, used=used) == []
    feed(judge, {SPIN: 1.0}, start=60.5, until=80, used=used)
    assert feed(judge, {SPIN: 0.6}, start=80.5, until=120, used=used) == []  # not calm yet


def test_an_ended_run_is_forgotten_and_a_new_one_starts_afresh() -> None:
    judge = HogJudge(LIMITS)
    judge.observe(0.0, {SPIN: 0.0})
    judge.observe(1.0, {})
    assert judge.observe(11.0, {SPIN: 10.0}) == []  # a new track: no window behind it


def test_a_gap_between_ticks_is_measured_over_the_longer_span() -> None:
    judge = HogJudge(LIMITS)
    judge.observe(0.0, {SPIN: 0.0})
    (found,) = judge.observe(30.0, {SPIN: 27.0})
    assert found.span == 30.0 and found.share == pytest.approx(0.9)


def test_proc_stat_lines_are_read_after_the_threads_name() -> None:
    line = b"4242 (run-ab) c) d) R 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0"
    assert cpu_seconds(line, 100) == 4.0
    assert cpu_seconds(b"4242 (x) R 1 2", 100) is None
    assert cpu_seconds(b"garbage", 100) is None


def test_the_proc_reader_sees_this_thread_and_not_an_ended_one() -> None:
    read = ThreadCpu()
    assert (read(threading.get_native_id()) or 0) > 0
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    assert ended.native_id is not None
    deadline = time.monotonic() + 5  # the OS thread ends a moment after join() returns
    while read(ended.native_id) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read(ended.native_id) is None


def test_the_card_line() -> None:
    assert hog_text(12.3) == "⚠️ busy on the CPU for 12s; other runs in this worker wait"


def test_where_names_the_innermost_frame_and_fanbots_own() -> None:
    import sys

    here = sys._getframe()
    assert where(here).startswith(f"at {__name__}:")
    assert where(None) == ""


class Progress:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def put(self, event: Any) -> None:
        self.events.append(event)


def fake_deps() -> Any:
    return SimpleNamespace(
        runs=SimpleNamespace(get=lambda run_id: SimpleNamespace(thread=THREAD)),
        progress=Progress(),
        jobs=SimpleNamespace(current_run_id=lambda job: None),
    )


def test_a_flagged_run_is_logged_and_its_card_told_once(caplog: pytest.LogCaptureFixture) -> None:
    deps, now, cpu = fake_deps(), [0.0], {11: 0.0, 12: 0.0}
    watch = HogWatch(deps, limits=LIMITS, clock=lambda: now[0], cpu_of=cpu.get)
    caplog.set_level(logging.INFO, logger="fanbot.worker")
    for _ in range(60):
        watch.tick([SPIN, IDLE])
        now[0] += 0.5
        cpu[11] += 0.5
        cpu[12] += 0.01
    (event,) = deps.progress.events
    assert event.run_id == "run-spin" and event.thread == THREAD
    assert event.text == "⚠️ busy on the CPU for 10s; other runs in this worker wait"
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "job job-spin (run run-spin) holds this worker process: 100% of a core for 10s" in (
        warning.getMessage()
    )


def test_a_turn_is_logged_only_and_a_report_failure_does_not_break_the_tick(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deps, now, cpu = fake_deps(), [0.0], {12: 0.0}
    deps.runs.get = lambda run_id: 1 / 0
    turn = Watched(tid=12, job_id="job-turn")
    spun = Watched(tid=12, job_id="job-spun", run_id="r")
    watch = HogWatch(deps, limits=LIMITS, clock=lambda: now[0], cpu_of=cpu.get)
    for _ in range(30):
        watch.tick([turn, spun])
        now[0] += 0.5
        cpu[12] += 0.5
    assert deps.progress.events == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("job job-turn holds this worker process" in m for m in messages)
    assert any("could not report job job-spun's CPU use" in m for m in messages)


def test_tick_runs_takes_a_workers_runs_as_they_are() -> None:
    deps, asked = fake_deps(), []
    deps.jobs.current_run_id = lambda job: f"run-of-{job.id}"
    here = threading.current_thread()
    unstarted = threading.Thread(target=lambda: None)

    def cpu_of(tid: int) -> float:
        asked.append(tid)
        return 1.0

    watch = HogWatch(deps, limits=LIMITS, clock=lambda: 0.0, cpu_of=cpu_of)
    job = SimpleNamespace(id="j1")
    runs = [SimpleNamespace(job=job, thread=here), SimpleNamespace(job=job, thread=unstarted),
            SimpleNamespace(job=job, thread=None)]  # fmt: skip
    assert watch.tick_runs(runs) == []
    assert asked == [here.native_id]
    (watched,) = watch.judge._tracks
    assert watched == Watched(tid=here.native_id, job_id="j1", run_id="run-of-j1", ident=here.ident)
