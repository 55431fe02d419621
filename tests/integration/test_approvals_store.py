"""Approvals against a real Redis: one decision wins however many race, it enqueues exactly
one resume job and edits the posted request; no answer in time means deny."""

from __future__ import annotations

import json
import threading
import time

from bot.deps import Deps
from bot.runs.approval_gate import DecisionRequest, decide, expire_due
from bot.runs.stop import stop_run
from bot.store.approvals import ApprovalRecord, ApprovalState, PendingCall
from bot.store.jobs import SUBAGENTS_QUEUE
from tests.integration.test_finalize import deps_for, make_run


def parked(deps: Deps, *, due_in: float = 3600) -> ApprovalRecord:
    record = make_run(deps)
    assert deps.runs.start(record.run_id, heartbeat_ttl=5).started
    deps.runs.park(record.run_id, rounds=0, approval_id="0a1b2c3d")
    now = time.time()
    approval = ApprovalRecord(
        approval_id="0a1b2c3d",
        run_id=record.run_id,
        thread=record.thread,
        requester=record.requester,
        calls=(PendingCall(id="c1", name="execute", arguments='{"command": "ls"}'),),
        created_at=now,
        due_at=now + due_in,
    )
    deps.approvals.create(approval)
    deps.redis.hset(deps.keys.parts(approval.request_key), "0", "msg-77")  # as egress records
    return approval


def outbox(deps: Deps) -> list[dict[str, object]]:
    entries = deps.redis.xrange(deps.keys.outbox)
    return [json.loads(fields[b"data"]) for _, fields in entries]


def test_racing_decisions_settle_once(redis_url: str) -> None:
    deps = deps_for(redis_url)
    parked(deps)
    answers = []

    def press(approve: bool) -> None:
        request = DecisionRequest(approval_id="0a1b2c3d", approve=approve)
        answers.append(decide(deps, request, platform="console", user_id="alice"))

    threads = [threading.Thread(target=press, args=(i % 2 == 0,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(not a.refused for a in answers) == 1
    record = deps.approvals.get("0a1b2c3d")
    assert record is not None and record.state in (ApprovalState.APPROVED, ApprovalState.DENIED)
    assert record.decided_by == "console:alice" and record.decided_at is not None
    [edit] = [m for m in outbox(deps) if m["edit_of"]]
    assert edit["edit_of"] == "msg-77"
    assert deps.jobs.queue(SUBAGENTS_QUEUE).job_ids == ["approval-0a1b2c3d"]
    assert deps.approvals.due(now=time.time() + 10_000) == []


def test_refusals_change_nothing(redis_url: str) -> None:
    deps = deps_for(redis_url)
    parked(deps)
    request = DecisionRequest(approval_id="0a1b2c3d", approve=True)
    other = decide(deps, request, platform="console", user_id="mallory")
    bad_args = DecisionRequest(approval_id="0a1b2c3d", approve=True, arguments="[1]")
    malformed = decide(deps, bad_args, platform="console", user_id="alice")
    missing = decide(deps, DecisionRequest(approval_id="ffffffff", approve=True),
                     platform="console", user_id="alice")  # fmt: skip
    assert other.refused and "only the person who started" in other.text
    assert malformed.refused and "JSON object" in malformed.text
    assert missing.refused
    record = deps.approvals.get("0a1b2c3d")
    assert record is not None and record.state is ApprovalState.PENDING
    assert outbox(deps) == [] and deps.jobs.queue(SUBAGENTS_QUEUE).job_ids == []


def test_an_admin_approves_with_new_arguments(redis_url: str) -> None:
    deps = deps_for(redis_url, admins=["console:root"])
    parked(deps)
    request = DecisionRequest(approval_id="0a1b2c3d", approve=True, arguments='{"command": "pwd"}')
    answer = decide(deps, request, platform="console", user_id="root")
    assert not answer.refused and "edited arguments by @root" in answer.text
    record = deps.approvals.get("0a1b2c3d")
    assert record is not None and record.arguments == '{"command": "pwd"}'


def test_no_answer_in_time_means_deny(redis_url: str) -> None:
    deps = deps_for(redis_url)
    parked(deps, due_in=-1)
    assert expire_due(deps) == ["0a1b2c3d"]
    assert expire_due(deps) == []  # settled once
    record = deps.approvals.get("0a1b2c3d")
    assert record is not None and record.state is ApprovalState.EXPIRED
    assert deps.jobs.queue(SUBAGENTS_QUEUE).job_ids == ["approval-0a1b2c3d"]
    late = decide(deps, DecisionRequest(approval_id="0a1b2c3d", approve=True),
                  platform="console", user_id="alice")  # fmt: skip
    assert late.refused and "Already decided" in late.text


def test_stopping_a_waiting_run_withdraws_its_request(redis_url: str) -> None:
    deps = deps_for(redis_url)
    approval = parked(deps)
    stop_run(deps, approval.run_id, by="console:alice")
    record = deps.approvals.get("0a1b2c3d")
    assert record is not None and record.state is ApprovalState.EXPIRED
    [edit] = [m for m in outbox(deps) if m["edit_of"]]
    assert "the run was stopped before a decision" in str(edit["text"])
    assert expire_due(deps, now=time.time() + 10_000) == []
    assert deps.jobs.queue(SUBAGENTS_QUEUE).job_ids == []  # nothing resumes
