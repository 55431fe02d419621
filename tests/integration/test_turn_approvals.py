"""One gate: a main-agent turn's gated tool call waits for a person, like a run's.

Real Redis, the real turn code and RQ's turn queue, an in-process scripted model. With
``tools.require_approval = ["write_file"]`` the main agent's ``write_file`` parks the turn
(nothing written, its job ends, the request with its buttons in the outbox); ``!approve``
queues the turn's resume job on the turns queue, which writes the file (with the approved
arguments) and answers; ``!deny`` gives the call its denial and the turn still answers.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rq.job import Job
from rq.serializers import JSONSerializer

from bot.agent.turn import execute_turn
from bot.agent.turn_recover import reap_turns
from bot.commands import default_router
from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest
from bot.config import Settings
from bot.deps import Deps
from bot.runs.approval_gate import RESUME_PREFIX, decide, expire_due, parse_decision
from bot.store.jobs import TurnJob
from bot.testing.function_model import FunctionModel
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.text.untrusted import RULE
from bot.types import Inbound, Sender, ThreadRef

SESSION = "agent:main:console:c:thread:t"
THREAD = {"platform": "console", "account": "a", "chat": "c", "thread": "t"}


def script(request: ChatRequest) -> Reply:
    """Writes a file (plus an ungated call in the same step), then reports what it got."""
    results = [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]
    if results:
        return Text("done: " + " | ".join(results))
    return ToolCalls(
        [
            Call("calculate", {"expression": "1+1"}),
            Call("write_file", {"file_path": "direct.txt", "content": "hello"}),
            Call("calculate", {"expression": "2+2"}),
        ]
    )


def deps_for(redis_url: str, **extra: Any) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={"base_url": "http://127.0.0.1:9/v1", "model": "fake-model", "max_retries": 0},  # type: ignore[arg-type]
        tools={"require_approval": ["write_file"]},  # type: ignore[arg-type]
        subagents={"announce": "cards"},  # type: ignore[arg-type]
        **extra,
    )
    return Deps.build(settings)


def turn(message_id: str = "m1") -> TurnJob:
    return TurnJob(
        session_key=SESSION,
        thread=THREAD,
        platform="console",
        sender_id="alice",
        sender_name="Alice",
        text="write direct.txt",
        message_id=message_id,
    )


def outbox(deps: Deps) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)]


def replies(deps: Deps, job: TurnJob) -> list[str]:
    return [m["text"] for m in outbox(deps) if m.get("idempotency_key") == job.reply_key]


def parked(deps: Deps, model: FunctionModel, job: TurnJob) -> str:
    """Runs the turn; asserts it parked at write_file and returns the approval id."""
    assert execute_turn(deps, model, job, job_id="turn-job-1") == ""
    assert deps.workspace.get_text(SESSION, "/direct.txt") is None  # nothing written
    assert replies(deps, job) == []  # no answer yet
    [request] = [m for m in outbox(deps) if str(m.get("idempotency_key")).startswith("approval:")]
    approval_id = request["idempotency_key"].split(":")[1]
    assert request["text"].startswith("🔐 The agent wants to run `write_file`:")
    assert [a["id"] for a in request["actions"]] == [
        f"!approve {approval_id}",
        f"!deny {approval_id}",
    ]
    approval = deps.approvals.get(approval_id)
    assert approval is not None and approval.reply_key == job.reply_key
    assert [c.name for c in approval.calls] == ["write_file", "calculate"]
    assert deps.turn_attempts.parked_on(job.reply_key) == approval_id
    assert not deps.turn_attempts.lease_alive(job.reply_key)  # its job ended
    # a parked turn has no worker to lose: the reaper leaves it, however long it waits
    assert reap_turns(deps, now=time.time() + 86_400) == []
    assert deps.turn_attempts.parked_on(job.reply_key) == approval_id
    return approval_id


def resume_job(deps: Deps, approval_id: str) -> TurnJob:
    """The resume job the decision queued on the turns queue, as a worker would get it."""
    job = Job.fetch(RESUME_PREFIX + approval_id, connection=deps.redis, serializer=JSONSerializer)
    assert job.origin == "turns"
    return TurnJob.model_validate(job.args[0])


def test_the_main_agent_write_file_waits_for_approve_then_writes_and_answers(
    redis_url: str,
) -> None:
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn()
    approval_id = parked(deps, model, job)
    # the system prompt says outside text is data (the one untrusted-content rule)
    assert RULE in str(model.requests[0].messages[0]["content"])

    bob = parse_decision(f"!approve {approval_id}")
    assert bob is not None
    refused = decide(deps, bob, platform="console", user_id="bob")
    assert refused.refused and "only the person who asked" in refused.text
    request = parse_decision(
        f'!approve {approval_id} {{"file_path": "direct.txt", "content": "hi"}}'
    )
    assert request is not None
    answer = decide(deps, request, platform="console", user_id="alice")
    assert not answer.refused, answer.text
    assert answer.text == "✅ The agent: `write_file` approved with edited arguments by @alice."

    resumed = resume_job(deps, approval_id)
    assert resumed.approval_id == approval_id
    text = execute_turn(deps, model, resumed, job_id=RESUME_PREFIX + approval_id)
    assert deps.workspace.get_text(SESSION, "/direct.txt") == "hi"  # the approved arguments
    assert text == "done: 2 | Wrote /direct.txt (2 B) | 4"
    assert replies(deps, job) == [text]
    assert deps.turn_attempts.get(job.reply_key) is None  # answered: no longer in flight
    history = deps.history.load(SESSION)
    assert [m["role"] for m in history] == ["user", "assistant"]
    # a second decision finds it decided, and nothing runs twice
    again = decide(deps, request, platform="console", user_id="alice")
    assert again.refused and again.text.startswith("Already decided")
    assert execute_turn(deps, model, resumed, job_id=RESUME_PREFIX + approval_id) == ""
    assert replies(deps, job) == [text]
    deps.close()


def test_a_resume_whose_enqueue_was_lost_is_queued_by_the_reaper(redis_url: str) -> None:
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn("m4")
    approval_id = parked(deps, model, job)
    request = parse_decision(f"!approve {approval_id}")
    assert request is not None
    assert not decide(deps, request, platform="console", user_id="alice").refused
    deps.jobs.fetch(RESUME_PREFIX + approval_id).delete()  # type: ignore[union-attr]
    assert reap_turns(deps, now=time.time() + 60) == [job.reply_key]
    text = execute_turn(
        deps, model, resume_job(deps, approval_id), job_id=RESUME_PREFIX + approval_id
    )
    assert text == "done: 2 | Wrote /direct.txt (5 B) | 4"
    deps.close()


def test_a_denied_call_gets_the_denial_and_the_turn_answers(redis_url: str) -> None:
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn("m2")
    approval_id = parked(deps, model, job)
    request = parse_decision(f"!deny {approval_id}")
    assert request is not None
    assert not decide(deps, request, platform="console", user_id="alice").refused
    text = execute_turn(
        deps, model, resume_job(deps, approval_id), job_id=RESUME_PREFIX + approval_id
    )
    assert deps.workspace.get_text(SESSION, "/direct.txt") is None
    assert text == "done: 2 | error: denied by @alice; the call did not run | 4"
    assert replies(deps, job) == [text]
    deps.close()


def test_no_answer_in_time_denies_and_resumes_the_turn(redis_url: str) -> None:
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn("m3")
    approval_id = parked(deps, model, job)
    assert expire_due(deps, now=deps.approvals.get(approval_id).due_at + 1) == [approval_id]  # type: ignore[union-attr]
    text = execute_turn(
        deps, model, resume_job(deps, approval_id), job_id=RESUME_PREFIX + approval_id
    )
    assert "nobody answered in time" in text
    assert deps.workspace.get_text(SESSION, "/direct.txt") is None
    deps.close()


def test_a_resume_job_whose_worker_died_goes_on_in_a_new_attempt(redis_url: str) -> None:
    """The approval's resume job lost its worker before it recorded the approved call's
    result: the next attempt reports that call as interrupted (outcome unknown: never run
    twice on a guess, never asked again), runs the rest of the step and answers once."""
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn("m5")
    approval_id = parked(deps, model, job)
    request = parse_decision(f"!approve {approval_id}")
    assert request is not None
    assert not decide(deps, request, platform="console", user_id="alice").refused
    resumed = resume_job(deps, approval_id)
    job_id = RESUME_PREFIX + approval_id
    recorded = deps.turn_attempts.begin(
        job.reply_key, job_id=job_id, attempt=resumed.attempt,
        payload=resumed.model_dump(mode="json"), lease_seconds=5, resumes=True,
    )  # fmt: skip
    assert recorded is not None  # it began, then its worker died
    got = deps.turn_attempts.decide(
        job.reply_key, dead_job=job_id, stop_flag=deps.keys.turn_stop(SESSION),
        max_resumes=2, why="test",
    )  # fmt: skip
    assert got.job_id == f"{job_id}-r2" and got.payload is not None
    again = TurnJob.model_validate({**got.payload, "attempt": got.attempt})
    text = execute_turn(deps, model, again, job_id=got.job_id)
    assert deps.workspace.get_text(SESSION, "/direct.txt") is None  # never ran: not asked again
    assert text.startswith("done: 2 | error: this call was interrupted")
    assert text.endswith("| 4") and replies(deps, job) == [text]
    asked = [m for m in outbox(deps) if m.get("actions")]
    assert len(asked) == 1  # one request, never a second
    deps.close()


def stop_command(deps: Deps, user: str) -> str:
    parsed = parse_command("/stop")
    assert parsed is not None
    inbound = Inbound(
        thread=ThreadRef.from_json(THREAD),
        sender=Sender(user_id=user, display_name=user),
        text="/stop",
        message_id=f"stop-{user}",
    )
    request = CommandRequest(command=parsed, inbound=inbound, session_key=SESSION, deps=deps)
    return default_router().dispatch(request)


def test_stop_withdraws_a_parked_turns_request_and_the_turn_answers_stopped(
    redis_url: str,
) -> None:
    """``/stop`` while the agent waits for a person: only the asker (or an admin) may; the
    request says the answer was stopped, the turn's resume job answers "Stopped." once,
    and nothing gated runs."""
    deps = deps_for(redis_url)
    model = FunctionModel(ScriptedModel().on(lambda r: True, script))
    job = turn("m6")
    approval_id = parked(deps, model, job)

    assert "asked for by someone else" in stop_command(deps, "bob")
    assert deps.turn_attempts.parked_on(job.reply_key) == approval_id  # bob changed nothing

    assert "Stopping the answer in progress" in stop_command(deps, "alice")
    [request] = [
        m for m in outbox(deps) if m["idempotency_key"] == f"approval:{approval_id}:outcome"
    ]
    assert request["text"] == (
        "⏹️ The agent: `write_file`: the answer was stopped before a decision."
    )
    late = parse_decision(f"!approve {approval_id}")
    assert late is not None
    assert decide(deps, late, platform="console", user_id="alice").refused  # decided already

    text = execute_turn(
        deps, model, resume_job(deps, approval_id), job_id=RESUME_PREFIX + approval_id
    )
    assert text == "Stopped." and replies(deps, job) == ["Stopped."]
    assert deps.workspace.get_text(SESSION, "/direct.txt") is None
    assert deps.turn_attempts.get(job.reply_key) is None
    deps.close()
