"""Size caps where text is stored in Redis: ingress, history, transcripts, a run's finalize."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator

import pytest
from rq.job import Job
from rq.serializers import JSONSerializer

from bot.commands import default_router
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.admission import Verdict
from bot.gateway.ingress import Ingress
from bot.runs.finalize import finalize_run
from bot.text.clip import clip, cut_note
from bot.types import Inbound, RunRecord, RunStatus, Sender, ThreadRef

MB = 1_000_000


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    built = Deps.build(Settings(redis_url=redis_url))
    yield built
    built.close()


def outbox(deps: Deps) -> list[dict[str, object]]:
    return [json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)]


def message(text: str, message_id: str = "m1") -> Inbound:
    return Inbound(
        thread=ThreadRef(platform="console", account="local", chat="c", thread="t"),
        sender=Sender(user_id="alice", display_name="alice"),
        text=text,
        message_id=message_id,
        mentioned=True,
    )


def test_ingress_queues_the_cut_text_and_tells_the_sender(deps: Deps) -> None:
    ingress = Ingress(deps=deps, router=default_router())
    big = message("p" * (1 << 20))
    tracemalloc.start()
    try:
        result = ingress.handle(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"\ningress peak for a 1 MiB message: {peak / MB:.2f} MB")
    assert peak < 1 << 20  # never a second copy of the whole message
    assert result.verdict is Verdict.ACCEPT and result.job_id
    job = Job.fetch(result.job_id, connection=deps.redis, serializer=JSONSerializer)
    limit = deps.settings.gateway.max_inbound_chars
    assert job.args[0]["text"] == "p" * limit + "\n" + cut_note((1 << 20) - limit)
    [notice] = outbox(deps)
    assert (
        notice["text"]
        == "✂️ Your message was 1,048,576 characters long; I read only the first 32,000."
    )
    assert notice["idempotency_key"] == "cut:console:m1"
    # The duplicate delivery of the same event is still deduped (no second notice).
    assert ingress.handle(big).duplicate and len(outbox(deps)) == 1


def test_an_oversized_command_is_answered_on_the_cut_text(deps: Deps) -> None:
    ingress = Ingress(deps=deps, router=default_router())
    result = ingress.handle(message("/help " + "h" * MB, "m2"))
    assert result.verdict is Verdict.ACCEPT and result.job_id is None
    notice, answer = outbox(deps)
    assert str(notice["text"]).startswith("✂️ Your message was 1,000,006 characters long")
    assert answer["idempotency_key"] == "cmd:console:m2" and len(str(answer["text"])) < 5_000


def test_history_keeps_each_entry_bounded_with_one_note(deps: Deps) -> None:
    session = "agent:main:console:c:thread:t"
    already_cut = clip("u" * MB, 32_000)
    deps.history.append(
        session,
        {"role": "user", "content": already_cut},
        {"role": "assistant", "content": "a" * MB},
        {"role": "assistant", "content": "short"},
    )
    kept = deps.settings.history.max_message_chars
    user, assistant, short = deps.history.load(session)
    assert user["content"] == "u" * kept + "\n" + cut_note(MB - kept)
    assert assistant["content"] == "a" * kept + "\n" + cut_note(MB - kept)
    assert short["content"] == "short"


def test_transcript_bounds_content_and_tool_arguments(deps: Deps) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{" * MB}}
    deps.transcripts.append("s1", {"role": "assistant", "content": "t" * MB, "tool_calls": [call]})
    deps.transcripts.append("s1", {"role": "tool", "tool_call_id": "c1", "content": "ok"})
    entry, tool = deps.transcripts.read("s1")
    limit = deps.transcripts.max_chars
    assert entry["content"] == "t" * limit + "\n" + cut_note(MB - limit)
    arguments = entry["tool_calls"][0]["function"]["arguments"]
    assert arguments == "{" * limit + "\n" + cut_note(MB - limit)
    assert entry["tool_calls"][0]["id"] == "c1" and tool["content"] == "ok"
    assert deps.redis.memory_usage(deps.keys.transcript("s1")) < 3 * limit


def test_finalizing_a_huge_result_bounds_history_and_announce(deps: Deps) -> None:
    record = RunRecord(
        run_id="f" * 32,
        seq=1,
        session_key="agent:main:console:c:thread:t",
        child_session_key="agent:main:subagent:f",
        session_id="sf",
        thread=ThreadRef(platform="console", account="local", chat="c", thread="t"),
        requester="console:alice",
        agent_id="main",
        subagent_type="general-purpose",
        task="write a lot",
        model="m",
        status=RunStatus.RUNNING,
        created_at=1.0,
    )
    deps.runs.create(record)
    result = clip("w" * 420_000, deps.settings.openai.max_reply_chars)
    assert finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result=result)
    stored = deps.runs.get(record.run_id)
    assert stored is not None and stored.status is RunStatus.SUCCESS
    assert stored.result == result  # the record keeps the model client's bound
    [note] = deps.history.load(record.session_key)
    assert len(note["content"]) < deps.settings.history.max_message_chars + 200
    assert note["content"].endswith("(truncated, 404,000 more characters)\n</untrusted>")
    [announce] = outbox(deps)
    assert "(truncated, 400,000 more characters)" in str(announce["text"])
    assert len(json.dumps(announce)) < deps.settings.subagents.max_result_chars + 2_000
