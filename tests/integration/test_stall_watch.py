"""The stall watchdog in the real run frame (``execute_run`` on Redis, bodies standing in for
the agent): the checkpoint path, the longer limit inside a tool, and a body that never
reaches a checkpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.steps import LoopControl, LoopResult, Meter
from bot.types import RunRecord, RunStatus
from tests.integration.test_control_redis import spawn_run


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={  # type: ignore[arg-type]
            "stall_seconds": 0.5,
            "stall_tool_seconds": 5,
            "stall_grace_seconds": 0.5,
        },
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def ended(deps: Deps, record: RunRecord) -> RunRecord:
    found = deps.runs.get(record.run_id)
    assert found is not None
    return found


def progress_texts(deps: Deps) -> list[str]:
    return [f[b"text"].decode() for _, f in deps.redis.xrange(deps.keys.progress) if b"text" in f]


def test_a_quiet_run_ends_stalled_at_its_next_checkpoint(deps: Deps) -> None:
    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        meter.last_text = "so far"
        for _ in range(200):
            control.checkpoint()
            time.sleep(0.05)
        return LoopResult(text="never", complete=True)

    record = spawn_run(deps)
    t0 = time.monotonic()
    assert execute_run(deps, record.run_id, body) == "timeout"
    assert time.monotonic() - t0 < 4
    run = ended(deps, record)
    assert run.result == "so far"
    assert run.notes.startswith("stalled: no model output and no tool event for 1s")
    assert any("unless it moves" in t for t in progress_texts(deps))


def test_a_long_tool_call_gets_the_tool_limit(deps: Deps) -> None:
    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        meter.touch("tool slow started", tool="slow")
        for _ in range(30):  # 1.5 s: past the plain limit and grace, within the tool's
            control.checkpoint()
            time.sleep(0.05)
        meter.touch("tool slow finished", tool="")
        return LoopResult(text="done", complete=True)

    record = spawn_run(deps)
    assert execute_run(deps, record.run_id, body) == "success"
    assert ended(deps, record).result == "done"


def test_a_body_that_never_reaches_a_checkpoint_is_ended_by_the_watchdog(deps: Deps) -> None:
    release = threading.Event()

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        meter.last_text = "partial"
        release.wait(15)  # like a model call that never yields a token
        return LoopResult(text="late", complete=True)

    record = spawn_run(deps)
    worker = threading.Thread(target=execute_run, args=(deps, record.run_id, body))
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while not ended(deps, record).status.terminal:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        release.set()
        worker.join()
    run = ended(deps, record)
    assert run.status is RunStatus.TIMEOUT and run.result == "partial"
    assert "stalled" in run.notes and "last activity: started" in run.notes
    assert deps.stops.due(now=time.time() + 60) == [record.run_id]  # the hard stop re-check


def test_the_watch_keeps_the_heartbeat_alive_through_a_long_step(redis_url: str) -> None:
    """One thread watches for stalls and refreshes the heartbeat: a body blocked longer
    than ``stale_after_seconds`` (a slow model call) is never taken for a dead process,
    and the beats stop with the run."""
    settings = Settings(
        redis_url=redis_url,
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"heartbeat_seconds": 0.05, "stale_after_seconds": 0.3},  # type: ignore[arg-type]
    )
    deps = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    record = spawn_run(deps)
    beats: list[bytes | None] = []
    threads: list[str] = []

    def body(run: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        threads.extend(t.name for t in threading.enumerate() if t.name.endswith(run.run_id[:8]))
        for _ in range(10):  # 1 s, blocked as in a model call: no checkpoint, no progress
            time.sleep(0.1)
            beats.append(deps.redis.get(deps.keys.heartbeat(run.run_id)))
        return LoopResult(text="done", complete=True)

    try:
        assert execute_run(deps, record.run_id, body) == "success"
        assert threads == [f"watch-{record.run_id[:8]}"]  # one thread beside the body
        assert None not in beats and len(set(beats)) >= 5  # alive and refreshed throughout
        assert not any(t.name == threads[0] for t in threading.enumerate())
    finally:
        deps.close()
