"""A run's start in one round trip, and what its first step may reuse of it (real Redis).

The start (:func:`bot.runs.execute.start_run`) marks the run running with a first
heartbeat, remembers ``out/``, puts "started" on its card and reads the run, its stop flag
and its inbox's length, all in one script; the first step's checkpoint and steering reuse
those readings when they come first, so the first model request waits for fewer round
trips. Nothing is written for a run that is not queued (stopped before its start).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bot.config import Settings
from bot.deps import Deps
from bot.errors import RunStopped
from bot.observe.job_observer import job_scope
from bot.observe.scope import current
from bot.runs.execute import execute_run, start_run
from bot.runs.finalize import finalize_run
from bot.runs.outfiles import SNAPSHOT_FIELD, announce_files
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.steps import LoopControl, LoopResult, Meter
from bot.store.progress import decode
from bot.types import RunRecord, RunStatus, ThreadRef, Usage

SESSION = "agent:main:telegram:1:topic:2"
THREAD = ThreadRef(platform="telegram", account="1", chat="1", thread="2")


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = Deps.build(Settings(redis_url=redis_url))
    yield d
    d.close()


def make_run(deps: Deps, run_id: str = "r1") -> RunRecord:
    record = RunRecord(
        run_id=run_id, seq=1, session_key=SESSION, child_session_key="c", session_id="s",
        thread=THREAD, requester="telegram:1", agent_id="main", subagent_type="general-purpose",
        task="t", model="m", created_at=time.time(), job_id=run_id,
    )  # fmt: skip
    deps.runs.create(record)
    return record


def progress_texts(deps: Deps) -> list[str]:
    events = []
    for _id, fields in deps.redis.xrange(deps.keys.progress):
        event = decode({k.decode(): v.decode() for k, v in fields.items()})
        assert event is not None and event.thread == THREAD
        events.append(event.text)
    return events


def commands(deps: Deps) -> dict[str, int]:
    """Calls per command since the last ``CONFIG RESETSTAT``."""
    stats: dict[str, Any] = deps.redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_a_start_marks_remembers_out_and_tells_the_card_in_one_script(deps: Deps) -> None:
    deps.workspace.put_bytes(SESSION, "out/old.txt", b"before")
    created = make_run(deps)
    start_run(deps, "not-a-run")  # loads the script
    deps.redis.config_resetstat()
    start = start_run(deps, "r1")
    assert commands(deps)["evalsha"] == 1  # the whole start is this one script
    assert start.started and not start.stop_requested and start.inbox == 0
    assert start.record == created  # as it was just before: queued
    now = deps.runs.get("r1")
    assert now is not None and now.status is RunStatus.RUNNING and now.started_at is not None
    assert deps.runs.heartbeat_alive("r1")
    snapshot = json.loads(deps.runs.field("r1", SNAPSHOT_FIELD) or "")
    assert snapshot == deps.workspace.hashes(SESSION, "out")
    assert progress_texts(deps) == ["started"]
    deps.workspace.put_bytes(SESSION, "out/new.txt", b"made by the run")
    assert announce_files(deps, created)[0] == ("/out/new.txt",)


def test_an_empty_out_is_remembered_as_empty(deps: Deps) -> None:
    make_run(deps)
    assert start_run(deps, "r1").started
    assert deps.runs.field("r1", SNAPSHOT_FIELD) == "{}"


def test_a_run_stopped_before_its_start_is_not_started_and_nothing_is_written(
    deps: Deps,
) -> None:
    make_run(deps)
    assert finalize_run(deps, "r1", status=RunStatus.STOPPED, notes="stopped by a")
    before = progress_texts(deps)
    start = start_run(deps, "r1")
    assert not start.started and start.record is not None
    assert start.record.status is RunStatus.STOPPED
    assert not deps.runs.heartbeat_alive("r1")
    assert deps.runs.field("r1", SNAPSHOT_FIELD) is None
    assert progress_texts(deps) == before  # no "started" after the final event
    assert execute_run(deps, "r1", _never) == "stopped"


def test_a_missing_run_is_not_started(deps: Deps) -> None:
    start = start_run(deps, "nope")
    assert (start.record, start.started) == (None, False)
    assert execute_run(deps, "nope", _never) == "missing"


def test_a_parked_run_resumes_once(deps: Deps) -> None:
    make_run(deps)
    assert start_run(deps, "r1").started
    assert not start_run(deps, "r1").started  # running already
    deps.runs.park("r1", rounds=1)
    assert start_run(deps, "r1", resume=True).started
    assert not start_run(deps, "r1", resume=True).started  # one resume only
    assert deps.runs.heartbeat_alive("r1")


def test_the_first_checkpoint_and_steering_reuse_the_start(deps: Deps) -> None:
    make_run(deps)
    seen: dict[str, Any] = {}

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        deps.redis.config_resetstat()
        control.checkpoint()
        seen["steering"] = control.steering()
        seen["first"] = commands(deps)
        control.checkpoint()  # the readings stand once: this one asks Redis
        seen["second"] = commands(deps)
        return LoopResult(text="done", complete=True)

    assert execute_run(deps, "r1", body) == "success"
    assert seen["steering"] == []
    assert "exists" not in seen["first"] and "lrange" not in seen["first"]
    assert seen["second"].get("exists") == 1


def test_a_message_waiting_at_the_start_is_read_at_the_first_step(deps: Deps) -> None:
    make_run(deps)
    deps.runs.push_inbox("r1", "also check the tests")
    seen: list[list[str]] = []

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        control.checkpoint()
        seen.append(control.steering())
        seen.append(control.steering())
        return LoopResult(text="done", complete=True)

    assert execute_run(deps, "r1", body) == "success"
    assert seen == [["also check the tests"], []]


def test_a_stop_flag_read_by_the_start_stops_the_first_step(deps: Deps) -> None:
    make_run(deps)
    deps.runs.request_stop("r1")  # raised, but not ended yet (a stop racing the start)

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        control.checkpoint()
        raise AssertionError("not stopped")

    assert execute_run(deps, "r1", body) == "stopped"


def test_a_stop_after_another_hook_is_seen_by_the_next_checkpoint(deps: Deps) -> None:
    make_run(deps)

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        control.progress("step 1")  # spends the start's readings
        deps.runs.request_stop(record.run_id)
        with pytest.raises(RunStopped):
            control.checkpoint()
        raise RunStopped("seen")

    assert execute_run(deps, "r1", body) == "stopped"


def test_a_spawn_puts_its_job_in_line_without_a_script_check(deps: Deps) -> None:
    def request(label: str) -> SpawnRequest:
        return SpawnRequest(
            task=f"task {label}", session_key=SESSION, thread=THREAD,
            requester="telegram:1", agent_id="main", label=label,
        )  # fmt: skip

    spawn_run(deps, request("a"), known_models=lambda: None)  # loads the scripts
    deps.redis.config_resetstat()
    record = spawn_run(deps, request("b"), known_models=lambda: None)
    calls = commands(deps)
    assert "script" not in calls  # no SCRIPT EXISTS before the fair line's script
    assert calls.get("evalsha") == 2  # the run's places (bot.runs.quota), the fair line's
    job = deps.jobs.fetch(record.job_id)
    assert job is not None and job.get_status(refresh=False) == "queued"
    assert job.args == [record.run_id] and job.origin == "subagents"


def test_the_queue_wait_is_recorded_with_the_first_metrics_or_at_the_end(deps: Deps) -> None:
    record = make_run(deps)

    def waits() -> float:
        snap = deps.metrics.read()
        found = [h.count for (name, _), h in snap.histograms.items() if "queue_wait" in name]
        return sum(found)

    with job_scope(deps, queue="subagents", run_id="r1", run=record):
        assert waits() == 0  # not before the first model request
    assert waits() == 1


def _never(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
    raise AssertionError("the body of a run that did not start ran")


def test_a_runs_metrics_go_out_with_its_end_in_the_finalize_script(deps: Deps) -> None:
    record = make_run(deps)

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        report = current().on_model_call
        assert report is not None
        report("m", Usage(prompt_tokens=3, completion_tokens=4), True)
        assert deps.metrics.read().counters == {}  # kept in the process meanwhile
        return LoopResult(text="done", complete=True)

    with job_scope(deps, queue="subagents", run_id="r1", run=record):
        assert execute_run(deps, "r1", body) == "success"
        assert not deps.metrics.pending  # the finalize script took them
        snap = deps.metrics.read()
    counters: dict[str, float] = {}
    for (name, _), value in snap.counters.items():
        counters[name] = counters.get(name, 0) + value
    assert counters["fanbot_model_calls"] == 1 and counters["fanbot_runs_ended"] == 1
    assert counters["fanbot_model_tokens"] == 7
    waits = [h.count for (name, _), h in snap.histograms.items() if "queue_wait" in name]
    assert waits == [1]
