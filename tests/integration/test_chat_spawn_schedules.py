"""Spawn from chat and schedules against real Redis: commands, the claim, late firings."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.runs.recurring import (
    UNFINISHED_AFTER_SECONDS,
    add_schedule,
    fire_due,
    tick_run_id,
)
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.store.schedules import NewSchedule, ScheduleStore
from bot.types import RunStatus, ThreadRef
from tests.integration.test_control_redis import THREAD, command, session_of

OTHER = ThreadRef(platform="slack", account="T1", chat="C1", thread="2.0")


def make_deps(redis_url: str, **schedules: Any) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        admins=["slack:UADMIN"],
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        schedules={"min_interval_seconds": 1, **schedules},  # type: ignore[arg-type]
    )
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url)
    yield d
    d.close()


def test_spawn_from_chat_starts_a_run_owned_by_the_person(deps: Deps) -> None:
    answer = command(deps, "/subagents spawn explore map the repository layout", user="U7")
    assert answer == "🚀 Started subagent #1 (explore): map the repository layout"
    (run,) = deps.runs.session_runs(session_of(THREAD))
    assert run.requester == "slack:U7" and run.subagent_type == "explore"
    assert run.task == "map the repository layout" and run.thread == THREAD
    assert run.status is RunStatus.QUEUED and run.join_id == ""
    assert deps.jobs.exists(run.job_id)


def test_spawn_without_a_type_word_takes_the_whole_text_as_task(deps: Deps) -> None:
    answer = command(deps, "/subagents spawn explorers should read the docs")
    assert answer.startswith("🚀 Started subagent #1 (general-purpose): explorers should")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/subagents spawn", "the task is missing"),
        ("/subagents spawn explore", "the task is missing"),
        ("/subagents spawn --thread", "the task is missing"),
        ("/subagents spawn --fast do it", "I don't know the option `--fast`"),
    ],
)
def test_spawn_refusals_start_nothing(deps: Deps, text: str, expected: str) -> None:
    assert expected in command(deps, text)
    assert deps.runs.session_runs(session_of(THREAD)) == []


def test_schedules_are_admin_only_by_default(deps: Deps) -> None:
    answer = command(deps, "/subagents every 2h check the build", user="U1")
    assert answer.startswith("I can't make that schedule: only an admin may manage schedules")
    assert deps.schedules.all() == []


def test_an_admin_schedules_lists_and_unschedules_in_the_thread(deps: Deps) -> None:
    made = command(deps, "/subagents every 2h explore check the build", user="UADMIN")
    assert made.startswith("⏰ Schedule #1: every 2h, first at ")
    assert "— explore: check the build" in made
    cron = command(deps, "/subagents every 0 9 * * 1-5 summarize issues", user="UADMIN")
    assert cron.startswith("⏰ Schedule #2: cron `0 9 * * 1-5` (UTC), first at ")

    listed = command(deps, "/subagents schedules")
    assert listed.startswith("*Schedules in this thread* (2)")
    assert "• #1 · every 2h · explore · next " in listed and "by slack:UADMIN: check" in listed
    assert command(deps, "/subagents schedules", thread=OTHER).startswith("No schedules")

    assert "only an admin may manage" in command(deps, "/subagents unschedule 1", user="U1")
    assert "No schedule `9` in this thread" in command(deps, "/subagents unschedule 9")
    assert "No schedule `2` in this thread" in command(deps, "/subagents unschedule 2", thread=OTHER)  # fmt: skip
    removed = command(deps, "/subagents unschedule #1", user="UADMIN")
    assert removed == "🗑️ Removed schedule #1 (every 2h): check the build"
    assert [s.schedule_id for s in deps.schedules.all()] == ["2"]


def test_with_who_anyone_people_remove_only_their_own(redis_url: str) -> None:
    d = make_deps(redis_url, who="anyone")
    try:
        assert command(d, "/subagents every 1d report", user="U1").startswith("⏰ Schedule #1")
        refused = command(d, "/subagents unschedule 1", user="U2")
        assert refused.endswith("only an admin or the person who made it may remove it.")
        assert command(d, "/subagents unschedule 1", user="U1").startswith("🗑️ Removed")
    finally:
        d.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/subagents every", "needs an interval"),
        ("/subagents every soon do it", "`soon` is neither an interval"),
        ("/subagents every 99 9 * * * do it", "neither an interval"),
        ("/subagents every 2h", "the task is missing"),
        ("/subagents every --thread 2h x", "I don't know the option `--thread`"),
        ("/subagents every 999d x", "too long"),
    ],
)
def test_schedule_parse_errors(deps: Deps, text: str, expected: str) -> None:
    assert expected in command(deps, text, user="UADMIN")


def _add(deps: Deps, *, seconds: int, now: float) -> None:
    add_schedule(
        deps,
        NewSchedule(
            every=f"{seconds}s",
            task="tick task",
            subagent_type="",
            thread=THREAD,
            session_key=session_of(THREAD),
            requester="slack:UADMIN",
            agent_id="main",
        ),
        now=now,
    )


def test_many_concurrent_claimers_fire_each_tick_once(deps: Deps, redis_url: str) -> None:
    _add(deps, seconds=60, now=1000.0)
    (schedule,) = deps.redis.zrange(deps.keys.schedules, 0, -1)
    store = ScheduleStore(redis=deps.redis, keys=deps.keys)
    wins: list[bool] = []
    barrier = threading.Barrier(16)

    def claimer() -> None:
        client = redis.Redis.from_url(redis_url)
        mine = ScheduleStore(redis=client, keys=deps.keys)
        (due,) = mine.due(now=1061.0)
        barrier.wait()
        wins.append(mine.claim(due, next_at=1120.0, now=1061.0))
        client.close()

    threads = [threading.Thread(target=claimer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1 and len(wins) == 16
    got = store.get(schedule.decode())
    assert got is not None and got.fired == 1 and got.next_time == 1120.0


def test_fire_due_from_many_threads_starts_one_run_per_tick(deps: Deps, redis_url: str) -> None:
    _add(deps, seconds=60, now=1000.0)
    started: list[str] = []
    barrier = threading.Barrier(8)

    def sweeper() -> None:
        d = make_deps(redis_url)
        barrier.wait()
        started.extend(fire_due(d, now=1065.0))
        d.close()

    threads = [threading.Thread(target=sweeper) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 1
    assert fire_due(deps, now=1070.0) == []  # same tick: nothing more
    assert len(fire_due(deps, now=1121.0)) == 1  # the next tick
    runs = deps.runs.session_runs(session_of(THREAD))
    assert [r.task for r in runs] == ["tick task", "tick task"]
    assert all(r.requester == "slack:UADMIN" and r.thread == THREAD for r in runs)
    assert all(not r.warnings for r in runs)


def test_missed_ticks_fire_once_and_say_late(deps: Deps) -> None:
    _add(deps, seconds=60, now=1000.0)
    # Workers were down from 1000 to 8260: 121 ticks passed (1060 ... 8260).
    (run_id,) = fire_due(deps, now=8265.0)
    assert fire_due(deps, now=8266.0) == []
    run = deps.runs.get(run_id)
    assert run is not None
    assert run.warnings == (
        "schedule #1 fired 2h late: workers were down (120 more ticks passed meanwhile; it ran once)",
    )
    (schedule,) = deps.schedules.all()
    assert schedule.fired == 1 and schedule.next_time == 8320.0 and schedule.last_run_id == run_id


def test_a_firing_whose_process_died_before_the_run_starts_it_once_later(deps: Deps) -> None:
    _add(deps, seconds=600, now=1000.0)
    store = deps.schedules
    (due,) = store.due(now=1601.0)
    assert store.claim(due, next_at=2200.0, now=1601.0)  # ... and the sweeper dies here
    assert fire_due(deps, now=1602.0) == []  # too soon to call it dead
    (run_id,) = fire_due(deps, now=1601.0 + UNFINISHED_AFTER_SECONDS)
    assert run_id == tick_run_id(due.schedule_id, due.next_at)
    assert fire_due(deps, now=2199.0) == []  # once
    (schedule,) = store.all()
    assert schedule.pending == "" and schedule.last_run_id == run_id
    assert [r.run_id for r in deps.runs.session_runs(session_of(THREAD))] == [run_id]


def test_a_firing_that_died_after_recording_its_run_is_not_run_twice(deps: Deps) -> None:
    _add(deps, seconds=600, now=1000.0)
    store = deps.schedules
    (due,) = store.due(now=1601.0)
    assert store.claim(due, next_at=2200.0, now=1601.0)
    run_id = tick_run_id(due.schedule_id, due.next_at)
    spawn_run(
        deps,
        SpawnRequest(
            task=due.task, session_key=due.session_key, thread=due.thread,
            requester=due.requester, agent_id="main", run_id=run_id,
        ),
        known_models=lambda: None,
    )  # fmt: skip  # ... and the sweeper dies before noting it
    assert fire_due(deps, now=1601.0 + UNFINISHED_AFTER_SECONDS) == [run_id]  # found, not new
    assert [r.run_id for r in deps.runs.session_runs(session_of(THREAD))] == [run_id]
    (schedule,) = store.all()
    assert schedule.pending == "" and schedule.last_run_id == run_id


def test_a_normal_firing_leaves_nothing_pending(deps: Deps) -> None:
    _add(deps, seconds=600, now=1000.0)
    (run_id,) = fire_due(deps, now=1601.0)
    (schedule,) = deps.schedules.all()
    assert schedule.pending == "" and schedule.last_run_id == run_id
    assert fire_due(deps, now=1601.0 + UNFINISHED_AFTER_SECONDS) == []


def test_operator_cli_adds_lists_and_removes(redis_url: str, deps: Deps) -> None:
    from typer.testing import CliRunner

    from bot.cli import app
    from tests.integration.test_control_ops_cli import env

    runner = CliRunner()
    where = ["--platform", "telegram", "--account", "B", "--chat", "-100", "--thread", "7"]
    added = runner.invoke(
        app, ["schedules", "add", "--every", "0 9 * * 1-5", *where, "--type", "explore", "digest"],
        env=env(redis_url),
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert added.output.startswith("added schedule #1, first at ")
    bad = runner.invoke(
        app, ["schedules", "add", "--every", "soon", *where, "x"], env=env(redis_url)
    )
    assert bad.exit_code == 1 and "neither an interval" in bad.output

    listed = runner.invoke(app, ["schedules", "list"], env=env(redis_url))
    assert listed.exit_code == 0, listed.output
    assert listed.output.startswith("#1    cron `0 9 * * 1-5` (UTC)")
    assert "telegram:B:-100:7  telegram:operator  explore: digest" in listed.output
    (made,) = deps.schedules.all()
    assert made.session_key == "agent:main:telegram:-100:topic:7"

    assert runner.invoke(app, ["schedules", "remove", "1"], env=env(redis_url)).exit_code == 0
    missing = runner.invoke(app, ["schedules", "remove", "1"], env=env(redis_url))
    assert missing.exit_code == 1 and "no schedule #1" in missing.output
    assert runner.invoke(app, ["schedules", "list"], env=env(redis_url)).output == "no schedules\n"
