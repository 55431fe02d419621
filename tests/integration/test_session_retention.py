"""Sessions expire (issue 27): history, run index and run counter carry
``FANBOT_SESSIONS__RETENTION_DAYS`` as a TTL, every write sets it again, and the
maintenance sweep gives keys from before this change one. Real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.store.session_ttl import SessionSweep, session_keys
from bot.types import RunRecord, RunStatus, ThreadRef
from workers.maintenance import sweep

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = "agent:main:slack:C1:thread:1.0"
DAY = 86_400


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(redis_url=redis_url, sessions={"retention_days": 2})  # type: ignore[arg-type]
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def _record(deps: Deps, run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id, seq=deps.runs.next_seq(SESSION), session_key=SESSION,
        child_session_key="agent:main:subagent:" + run_id, session_id="s-" + run_id,
        thread=THREAD, requester="slack:U1", agent_id="main", subagent_type="general-purpose",
        task="t", model="m", created_at=time.time(), job_id=run_id,
    )  # fmt: skip


def ttls(deps: Deps) -> dict[str, int]:
    found = {k.rsplit(":", 1)[-1]: int(deps.redis.ttl(k)) for k in session_keys(deps.keys, SESSION)}
    return {name: ttl for name, ttl in found.items() if ttl != -2}  # -2: no such key


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_SESSIONS__RETENTION_DAYS", "3")
    assert Settings().sessions.ttl_seconds == 3 * DAY


def test_every_session_key_gets_the_retention_and_activity_refreshes_it(deps: Deps) -> None:
    deps.history.append(SESSION, {"role": "user", "content": "hi"})
    deps.runs.create(_record(deps, "r1"))
    got = ttls(deps)
    assert set(got) == {"history", "runs", "seq"}
    assert all(2 * DAY - 60 < t <= 2 * DAY for t in got.values()), got

    for key in session_keys(deps.keys, SESSION):  # time passes: a day left
        deps.redis.expire(key, DAY)
    deps.history.append(SESSION, {"role": "assistant", "content": "hello"})
    assert all(t > DAY + 60 for t in ttls(deps).values()), ttls(deps)

    for key in session_keys(deps.keys, SESSION):
        deps.redis.expire(key, DAY)
    deps.runs.create(_record(deps, "r2"))  # a new run is activity too
    assert all(t > DAY + 60 for t in ttls(deps).values()), ttls(deps)


def test_a_runs_end_sets_the_historys_ttl_in_its_script(deps: Deps) -> None:
    deps.runs.create(_record(deps, "r1"))
    deps.redis.delete(deps.keys.history(SESSION))
    assert finalize_run(deps, "r1", status=RunStatus.ERROR, notes="boom")
    history = deps.keys.history(SESSION)
    assert deps.redis.llen(history) >= 1  # the run's result entered the history
    assert 2 * DAY - 60 < int(deps.redis.ttl(history)) <= 2 * DAY


def test_the_sweep_gives_old_session_keys_a_ttl_in_bounded_passes(deps: Deps) -> None:
    p = deps.keys.prefix
    old = []
    for i in range(60):  # written before sessions expired: no TTL
        session = f"agent:main:slack:C{i}"
        deps.redis.rpush(deps.keys.history(session), "{}")
        deps.redis.zadd(deps.keys.session_runs(session), {"r": 1.0})
        deps.redis.set(deps.keys.session_seq(session), 3)
        deps.redis.hset(deps.keys.session_summary(session), "text", "s")
        deps.redis.set(deps.keys.session_model(session), "m")
        old += session_keys(deps.keys, session)
    others = [f"{p}session:x:joins", f"{p}workspace:x", f"{p}sessionsnot:x:history"]
    for key in others:
        deps.redis.sadd(key, "m") if key.endswith("joins") else deps.redis.set(key, "v")

    small = SessionSweep(redis=deps.redis, keys=deps.keys, ttl=2 * DAY, count=20, every=0, rest=0)
    passes, given = 0, 0
    while True:
        passes += 1
        given += small.sweep_once()
        if int(deps.redis.get(deps.keys.session_sweep_cursor) or 0) == 0 or passes > 200:
            break
    assert passes > 1  # bounded: one pass saw only a slice of the keyspace
    assert given == len(old) == 300
    assert all(0 < int(deps.redis.ttl(k)) <= 2 * DAY for k in old)
    assert [int(deps.redis.ttl(k)) for k in others] == [-1, -1, -1]  # not session keys
    deps.redis.set(deps.keys.session_sweep_cursor, 0)  # a second round: nothing more to give
    assert sum(small.sweep_once() for _ in range(passes + 5)) == 0


def test_the_maintenance_pass_runs_the_sweep(deps: Deps) -> None:
    key = deps.keys.history("agent:main:telegram:42")
    deps.redis.rpush(key, "{}")
    sweep(deps)
    assert 0 < int(deps.redis.ttl(key)) <= 2 * DAY
    # the round is done (a small keyspace: one pass): the sweep rests, whoever asks
    late = deps.keys.history("agent:main:telegram:43")
    deps.redis.rpush(late, "{}")
    assert deps.session_sweep.sweep_once() == 0
    assert int(deps.redis.ttl(late)) == -1
    assert int(deps.redis.ttl(deps.keys.session_sweep_cursor + ":wait")) > 3_000
