"""The control plane against real Redis and RQ: stop, send/follow-up, scope, commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.agent.context import ToolContext
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.agent.tools import execute_tool
from bot.commands import default_router
from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest
from bot.config import Settings
from bot.deps import Deps
from bot.runs.access import scope_runs
from bot.runs.finalize import finalize_run
from bot.runs.send import SendOutcome, send
from bot.runs.stop import resend_hard_stops, stop_run
from bot.sessions import requester_session_key
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.types import Inbound, RunRecord, RunStatus, Sender, ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        admins=["slack:UADMIN"],
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        subagents={"max_concurrent": 1, "archive_after_minutes": 60},  # type: ignore[arg-type]
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def session_of(thread: ThreadRef) -> str:
    return requester_session_key(agent_id="main", thread=thread)


def spawn_run(
    deps: Deps, *, thread: ThreadRef = THREAD, user: str = "U1", task: str = "t", **kw: Any
) -> RunRecord:
    ctx = ToolContext(
        deps=deps,
        session_key=session_of(thread),
        thread=thread,
        requester=f"{thread.platform}:{user}",
        agent_id="main",
    )
    answer = spawn(ctx, SpawnArgs(task=task, **kw))
    record = deps.runs.get(str(answer["runId"]))
    assert record is not None
    return record


def announces(deps: Deps) -> list[dict[str, Any]]:
    entries = deps.redis.xrange(deps.keys.outbox)
    out = [json.loads(fields[b"data"]) for _id, fields in entries]
    return [o for o in out if o["kind"] == "announce"]


def job_status(deps: Deps, job_id: str) -> JobStatus | None:
    return Job.fetch(job_id, connection=deps.redis, serializer=JSONSerializer).get_status()


def command(deps: Deps, text: str, *, user: str = "U1", thread: ThreadRef = THREAD) -> str:
    parsed = parse_command(text)
    assert parsed is not None
    inbound = Inbound(
        thread=thread, sender=Sender(user_id=user, display_name=user), text=text, message_id="m"
    )
    request = CommandRequest(
        command=parsed, inbound=inbound, session_key=session_of(thread), deps=deps
    )
    return default_router().dispatch(request)


def test_stopping_a_queued_run_cancels_its_job_and_frees_its_slot(deps: Deps) -> None:
    first = spawn_run(deps, task="first")
    second = spawn_run(deps, task="second")  # max_concurrent=1: waits for the slot
    assert job_status(deps, second.job_id) is JobStatus.RATE_LIMITED

    result = stop_run(deps, first.run_id, by="alice (slack:U1)")

    assert result.ended and result.was is RunStatus.QUEUED and not result.hard_stop_sent
    record = deps.runs.get(first.run_id)
    assert record is not None and record.status is RunStatus.STOPPED
    assert record.notes == "stopped by alice (slack:U1) before it started"
    assert job_status(deps, first.job_id) is JobStatus.CANCELED
    assert job_status(deps, second.job_id) is JobStatus.QUEUED  # promoted into the slot
    queued = deps.jobs.queue(SUBAGENTS_QUEUE).get_job_ids()
    assert queued == [second.job_id]
    assert [a["idempotency_key"] for a in announces(deps)] == [f"announce:{first.run_id}"]


def test_a_second_stop_is_a_no_op_with_one_announce(deps: Deps) -> None:
    record = spawn_run(deps)
    assert stop_run(deps, record.run_id, by="a").ended
    again = stop_run(deps, record.run_id, by="a")
    assert not again.ended and again.was is RunStatus.STOPPED
    assert finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="late") is False
    assert len(announces(deps)) == 1


def test_stopping_a_running_run_keeps_its_partial_result(deps: Deps) -> None:
    record = spawn_run(deps, label="Research")
    assert deps.runs.start(record.run_id, heartbeat_ttl=30).started
    deps.runs.update(record.run_id, result="half of it", prompt_tokens=1200, completion_tokens=300)
    deps.transcripts.append(record.session_id, {"role": "user", "content": "t"})

    result = stop_run(deps, record.run_id, by="alice (slack:U1)")

    assert result.ended and result.was is RunStatus.RUNNING
    assert not result.hard_stop_sent  # no worker executes it in this test
    assert deps.runs.stop_requested(record.run_id)
    (announce,) = announces(deps)
    assert '⏹️ Subagent #1 "Research" (general-purpose) was stopped' in announce["text"]
    assert "Status: stopped" in announce["text"]
    assert "Result: half of it" in announce["text"]
    assert (
        "Notes: stopped by alice (slack:U1) after 0s (1 transcript message(s), 1.5k tokens"
        in (announce["text"])
    )
    assert "the result is partial" in announce["text"]
    pending = deps.redis.zrange(deps.keys.stops_pending, 0, -1)
    assert pending == [record.run_id.encode()]
    # The sweep drops it once no worker executes the job.
    assert resend_hard_stops(deps, now=2e9) == []
    assert deps.redis.zcard(deps.keys.stops_pending) == 0


def test_channel_scope_gathers_the_channels_thread_sessions(deps: Deps) -> None:
    in_a = spawn_run(deps, thread=THREAD, task="a")
    in_b = spawn_run(
        deps, thread=ThreadRef(platform="slack", account="T1", chat="C1", thread="2.0")
    )
    spawn_run(deps, thread=ThreadRef(platform="slack", account="T1", chat="C12", thread="1.0"))
    spawn_run(deps, thread=ThreadRef(platform="telegram", account="B", chat="C1", thread="1.0"))
    channel = ThreadRef(platform="slack", account="T1", chat="C1")

    runs = scope_runs(deps, session_key=session_of(channel), thread=channel)

    assert [r.run_id for r in runs] == [in_b.run_id, in_a.run_id]
    assert [r.run_id for r in scope_runs(deps, session_key=session_of(THREAD), thread=THREAD)] == [
        in_a.run_id
    ]
    listing = command(deps, "/subagents list", thread=channel)
    assert listing.startswith("**Subagents in this channel** — 2 active · 0 done")


def test_send_steers_a_running_run(deps: Deps) -> None:
    record = spawn_run(deps)
    assert deps.runs.start(record.run_id, heartbeat_ttl=30).started
    result = send(deps, record, "focus on B", requester="slack:U1")
    assert result.outcome is SendOutcome.STEERED and result.run.run_id == record.run_id
    assert [m for m, _ in deps.runs.drain_inbox_receipts(record.run_id)] == ["focus on B"]


def test_send_to_a_finished_run_starts_a_follow_up_on_the_same_session(deps: Deps) -> None:
    record = spawn_run(deps, label="L")
    assert deps.runs.start(record.run_id, heartbeat_ttl=30).started
    finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="first answer")
    assert deps.redis.zscore(deps.keys.archive_due, record.run_id) is not None

    result = send(deps, record, "now in French", requester="slack:UADMIN")

    new = result.run
    assert result.outcome is SendOutcome.FOLLOW_UP
    assert new.run_id != record.run_id and new.seq == 2 and new.status is RunStatus.QUEUED
    assert (new.child_session_key, new.session_id) == (record.child_session_key, record.session_id)
    assert new.task == "now in French" and new.label == "L" and new.requester == "slack:UADMIN"
    assert deps.redis.zscore(deps.keys.archive_due, record.run_id) is None  # session lives on
    assert new.job_id in deps.jobs.queue(SUBAGENTS_QUEUE).get_job_ids()  # slot free: queued
    # A second send to the old run goes to the live follow-up instead of forking the session.
    again = send(deps, record, "and shorter", requester="slack:U1")
    assert again.outcome is SendOutcome.STEERED and again.run.run_id == new.run_id


def test_send_to_an_archived_session_is_refused(deps: Deps) -> None:
    record = spawn_run(deps, cleanup="delete")
    deps.transcripts.append(record.session_id, {"role": "user", "content": "t"})
    finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="x")
    from workers.maintenance import archive_due

    assert archive_due(deps) == [record.run_id]
    record = deps.runs.get(record.run_id)  # type: ignore[assignment]
    assert deps.transcripts.current_key(
        record.session_id, archived_at=record.archived_at
    ).startswith(deps.keys.transcript(record.session_id) + ".deleted.")
    assert send(deps, record, "more", requester="slack:U1").outcome is SendOutcome.ARCHIVED
    answer = command(deps, "/subagents send 1 more")
    assert "its session is archived" in answer
    log = command(deps, "/subagents log 1")  # the archived transcript is still readable
    assert "• **user**: t" in log


def test_commands_refuse_others_and_leave_the_run_untouched(deps: Deps) -> None:
    mine = spawn_run(deps, user="U1", task="mine")
    theirs = spawn_run(deps, user="U2", task="theirs")

    # Each run keeps the number its announce shows: mine is #1, theirs #2.
    refused = command(deps, "/subagents stop 2", user="U1")
    assert refused == (
        "I can't stop subagent #2 · theirs: Only an admin or the person who started it can "
        "stop this run."
    )
    record = deps.runs.get(theirs.run_id)
    assert record is not None and record.status is RunStatus.QUEUED
    assert not deps.runs.stop_requested(theirs.run_id)
    assert "I can't send to" in command(deps, "/subagents send #2 hi", user="U1")
    assert [m for m, _ in deps.runs.drain_inbox_receipts(theirs.run_id)] == []

    answer = command(deps, "/subagents stop all", user="U1")
    assert answer == (
        "⏹️ Stopped 1: #1.\nSkipped 1 started by someone else (#2): only an admin or the "
        "person who started a run can stop it."
    )
    assert deps.runs.get(mine.run_id).status is RunStatus.STOPPED  # type: ignore[union-attr]
    assert command(deps, "/stop", user="UADMIN") == "⏹️ Stopped 1: #2."
    assert command(deps, "/stop", user="UADMIN") == (
        "Nothing to stop: no subagent is queued or running here."
    )
    assert command(deps, "/subagents stop 1") == (
        "Subagent #1 · mine already ended (stopped); nothing to stop."
    )
    bodies = [a["text"] for a in announces(deps)]
    assert any(b.startswith('⏹️ Subagent #1 "mine"') for b in bodies), bodies
    assert any(b.startswith('⏹️ Subagent #2 "theirs"') for b in bodies), bodies
    assert len(announces(deps)) == 2


def test_commands_answer_info_log_and_garbage(deps: Deps) -> None:
    assert command(deps, "/subagents list").startswith("No subagents have been started here yet")
    record = spawn_run(deps, task="count things")
    deps.transcripts.append(record.session_id, {"role": "user", "content": "count things"})
    info = command(deps, f"/subagents info {record.run_id[:6]}")
    assert f"• Run id: `{record.run_id}`" in info
    assert "• Cleanup: keep · Archive: after it ends" in info
    assert command(deps, "/subagents log last 5").endswith("• **user**: count things")
    assert "I don't know `/subagents frobnicate`" in command(deps, "/subagents frobnicate")
    assert "needs an id" in command(deps, "/subagents stop")
    assert "not a valid log limit" in command(deps, "/subagents log 1 -5")
    assert "There is no run #7 here" in command(deps, "/subagents info #7")


def test_session_tools_read_and_message_runs_with_the_same_rules(deps: Deps) -> None:
    record = spawn_run(deps, user="U2", task="theirs")
    assert deps.runs.start(record.run_id, heartbeat_ttl=30).started
    deps.transcripts.append(record.session_id, {"role": "user", "content": "theirs"})
    tools = {t.name: t for t in SESSION_TOOLS_LIST}

    def call(name: str, requester: str, **args: Any) -> str:
        ctx = ToolContext(
            deps=deps, session_key=session_of(THREAD), thread=THREAD, requester=requester,
            agent_id="main",
        )  # fmt: skip
        return execute_tool(tools, name=name, arguments=json.dumps(args), ctx=ctx, max_chars=9999)

    history = json.loads(call("sessions_history", "slack:U1", id="last"))
    assert history["messages"] == [{"role": "user", "content": "theirs"}]
    refused = call("sessions_send", "slack:U1", id="1", message="hi")
    assert refused.startswith("error: Only an admin or the person who started it")
    assert [m for m, _ in deps.runs.drain_inbox_receipts(record.run_id)] == []
    sent = json.loads(call("sessions_send", "slack:U2", id="1", message="hi"))
    assert sent["status"] == "steered" and [
        m for m, _ in deps.runs.drain_inbox_receipts(record.run_id)
    ] == ["hi"]
    assert call("sessions_history", "slack:U1", id="zz").startswith(
        "error: zz is not a run id I know"
    )


def test_archived_runs_expire_after_the_retention_and_indexes_are_pruned(deps: Deps) -> None:
    from workers.maintenance import archive_due

    old = spawn_run(deps, cleanup="delete")
    deps.transcripts.append(old.session_id, {"role": "user", "content": "t"})
    finalize_run(deps, old.run_id, status=RunStatus.SUCCESS, result="x")
    keep = deps.settings.subagents.retention_days * 86_400
    assert archive_due(deps) == [old.run_id]
    again = deps.runs.get(old.run_id)
    assert again is not None
    archived = deps.transcripts.current_key(again.session_id, archived_at=again.archived_at)
    for key in (deps.keys.run(old.run_id), archived):
        assert 0 < deps.redis.ttl(key) <= keep  # gone after the retention, not kept forever

    # A later archive pass prunes the indexes of runs older than the retention.
    long_ago = old.created_at - keep - 60
    deps.redis.zadd(deps.keys.all_runs, {old.run_id: long_ago})
    deps.redis.zadd(deps.keys.session_runs(old.session_key), {old.run_id: long_ago})
    new = spawn_run(deps, cleanup="delete")
    finalize_run(deps, new.run_id, status=RunStatus.SUCCESS, result="y")
    assert archive_due(deps) == [new.run_id]
    assert deps.redis.zscore(deps.keys.all_runs, old.run_id) is None
    assert deps.redis.zscore(deps.keys.session_runs(old.session_key), old.run_id) is None
    assert deps.redis.zscore(deps.keys.all_runs, new.run_id) is not None


def test_the_reaper_leaves_a_just_spawned_run_alone_until_its_job_is_overdue(deps: Deps) -> None:
    from workers.maintenance import reap

    record = spawn_run(deps)
    Job.fetch(record.job_id, connection=deps.redis, serializer=JSONSerializer).delete()
    # The record exists before its job is enqueued: a sweep in between must not end it.
    assert reap(deps, now=record.created_at + 0.05) == []
    assert deps.runs.get(record.run_id).status is RunStatus.QUEUED  # type: ignore[union-attr]
    stale = deps.settings.subagents.stale_after_seconds
    assert reap(deps, now=record.created_at + stale + 1) == [record.run_id]
    assert deps.runs.get(record.run_id).status is RunStatus.UNKNOWN  # type: ignore[union-attr]
