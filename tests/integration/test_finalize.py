"""The one terminal transition: atomic, exactly once, whatever calls it."""

from __future__ import annotations

import threading
import time

import redis

from bot.config import Settings
from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.types import RunRecord, RunStatus, ThreadRef


def make_run(deps: Deps, run_id: str = "r1", **kw: object) -> RunRecord:
    fields: dict[str, object] = dict(
        run_id=run_id,
        seq=1,
        session_key="agent:main:console:c:thread:t",
        child_session_key="agent:main:subagent:x",
        session_id=f"s-{run_id}",
        thread=ThreadRef(platform="console", account="a", chat="c", thread="t"),
        requester="console:alice",
        agent_id="main",
        subagent_type="general-purpose",
        task="t",
        model="m",
        created_at=time.time(),
        job_id=run_id,
    )
    fields.update(kw)
    record = RunRecord(**fields)  # type: ignore[arg-type]
    deps.runs.create(record)
    return record


def deps_for(url: str, **values: object) -> Deps:
    return Deps.build(Settings(redis_url=url, **values))  # type: ignore[arg-type]


def test_concurrent_finalizers_make_one_transition_and_one_announce(redis_url: str) -> None:
    deps = deps_for(redis_url)
    make_run(deps)
    results: list[bool] = []
    statuses = [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.UNKNOWN, RunStatus.STOPPED] * 5

    def end(status: RunStatus) -> None:
        results.append(finalize_run(deps, "r1", status=status, result="r", notes=""))

    threads = [threading.Thread(target=end, args=(s,)) for s in statuses]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    assert deps.redis.xlen(deps.keys.outbox) == 1
    assert deps.redis.llen(deps.keys.history("agent:main:console:c:thread:t")) == 1
    record = deps.runs.get("r1")
    assert record is not None and record.status.terminal and record.ended_at is not None
    assert "r1" not in deps.runs.active_ids()
    deps.close()


def test_finalize_releases_the_rq_slot_and_schedules_archive(redis_url: str) -> None:
    deps = deps_for(redis_url, subagents={"archive_after_minutes": 1})
    make_run(deps)
    slots = deps.jobs.subagent_slot_key()  # the fair slots (bot.store.fair)
    deps.redis.zadd(slots, {"r1": 1.0})
    assert finalize_run(deps, "r1", status=RunStatus.SUCCESS, result="ok")
    assert deps.redis.zscore(slots, "r1") is None
    due = deps.redis.zscore(deps.keys.archive_due, "r1")
    assert due is not None and 55 < due - time.time() < 65
    deps.close()


def test_announce_skip_posts_nothing(redis_url: str) -> None:
    deps = deps_for(redis_url)
    make_run(deps)
    assert finalize_run(deps, "r1", status=RunStatus.SUCCESS, result="ANNOUNCE_SKIP")
    assert deps.redis.exists(deps.keys.outbox) == 0
    assert deps.runs.get("r1").status is RunStatus.SUCCESS  # type: ignore[union-attr]
    deps.close()


def test_backup_finalizers_keep_the_partial_result(redis_url: str) -> None:
    deps = deps_for(redis_url, prices={"m": {"input": 1, "output": 1}})
    make_run(deps)
    deps.runs.update("r1", result="half done", prompt_tokens=10, completion_tokens=5)
    assert finalize_run(deps, "r1", status=RunStatus.UNKNOWN, notes="worker died")
    entry = deps.redis.xrange(deps.keys.outbox)[0][1][b"data"].decode()
    assert "half done" in entry and "worker died" in entry and "tokens 15" in entry
    deps.close()


def test_running_needs_queued(redis_url: str) -> None:
    deps = deps_for(redis_url)
    make_run(deps)
    assert deps.runs.start("r1", heartbeat_ttl=5).started
    assert not deps.runs.start("r1", heartbeat_ttl=5).started
    assert deps.runs.heartbeat_alive("r1")
    finalize_run(deps, "r1", status=RunStatus.STOPPED)
    assert not deps.runs.heartbeat_alive("r1")
    assert not deps.runs.start("r1", heartbeat_ttl=5).started
    client = redis.Redis.from_url(redis_url)
    assert client.sismember(deps.keys.active_runs, "r1") == 0
    client.close()
    deps.close()
