"""Threads that outgrow the window (docs/models.md): real Redis, the real turn function, the
real ``openai`` SDK against :class:`FakeOpenAI` with a small context window.

A 300-turn thread against an 8k-token window keeps answering: older turns are compacted
into a summary kept in the session (``/context`` shows it), and the fake never sees a
request over its window. A window smaller than fanbot believes gets a "context too long"
answer, which is compacted and retried, never a failed turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bot.agent.llm import OpenAIChatModel
from bot.agent.turn import execute_turn
from bot.commands import default_router
from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest
from bot.config import Settings
from bot.deps import Deps
from bot.models.window import SUMMARY_INSTRUCTION
from bot.store.jobs import TurnJob
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ChatRequest, Reply, ScriptedModel, Text
from bot.types import Inbound, RunStatus, Sender, ThreadRef

SESSION = "agent:main:console:c:thread:t"
THREAD = {"platform": "console", "account": "a", "chat": "c", "thread": "t"}
SUMMARY_START = SUMMARY_INSTRUCTION.split(".")[0]
WORDS = "The quick brown fox jumps over the lazy dog while the team plans the release. "


def summarize(request: ChatRequest) -> Reply:
    """The summarizing call: a short summary that names how much it read."""
    material = str(request.messages[-1].get("content") or "")
    return Text(f"Summary of {len(material)} characters: the team talked about the release.")


def answer(request: ChatRequest) -> Reply:
    last = str(request.messages[-1].get("content") or "")
    return Text(f"Noted ({len(last)} characters). " + WORDS * 3)


def script() -> ScriptedModel:
    return (
        ScriptedModel(default=None)
        .on(lambda r: SUMMARY_START in str(r.messages[0].get("content") or ""), summarize)
        .on(lambda r: True, answer)
    )


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(script(), context_window=8_000) as server:
        yield server


def deps_for(redis_url: str, base_url: str, *, window: int | None) -> Deps:
    settings = Settings(
        redis_url=redis_url,
        openai={  # type: ignore[arg-type]
            "base_url": base_url,
            "model": "fake-model",
            "max_retries": 0,
            "context_window": window,
        },
        subagents={"announce": "cards"},  # type: ignore[arg-type]
    )
    return Deps.build(settings)


def turn(i: int, text: str) -> TurnJob:
    return TurnJob(
        session_key=SESSION, thread=THREAD, platform="console", sender_id="alice",
        sender_name="Alice", text=text, message_id=f"m{i}",
    )  # fmt: skip


def context_answer(deps: Deps, text: str = "/context") -> str:
    inbound = Inbound(
        thread=ThreadRef(**THREAD), sender=Sender(user_id="alice", display_name="Alice"),
        text=text, message_id="ctx-1",
    )  # fmt: skip
    command = parse_command(text)
    assert command is not None
    return default_router().dispatch(
        CommandRequest(command=command, inbound=inbound, session_key=SESSION, deps=deps)
    )


def refused_then_retried(fake: FakeOpenAI) -> bool:
    """Every request the fake refused as too long was followed (after the summarizing call
    its compaction made) by a retry it answered."""
    records = [r for r in fake.requests if SUMMARY_START not in _system(r.body)]
    for i, record in enumerate(records):
        if record.status == 400 and (i + 1 >= len(records) or records[i + 1].status != 200):
            return False
    return True


def test_a_300_turn_thread_keeps_answering_in_an_8k_window(
    redis_url: str, fake: FakeOpenAI
) -> None:
    deps = deps_for(redis_url, fake.base_url, window=8_000)
    model = OpenAIChatModel(settings=deps.settings.openai)
    try:
        for i in range(300):
            text = f"Turn {i}: " + WORDS * (2 + i % 5)
            reply = execute_turn(deps, model, turn(i, text))
            assert reply.startswith("Noted ("), (i, reply)
    finally:
        model.close()
    summaries = [r for r in fake.requests if SUMMARY_START in _system(r.body)]
    # compacted again and again as the thread grew, each time for several turns to come
    assert 3 <= len(summaries) <= 60
    assert fake.too_long == 0  # never sent a request over the window
    assert max(fake.prompt_tokens(r) for r in fake.requests) <= 8_000
    summary = deps.summaries.get(SESSION)
    assert summary is not None and summary.text.startswith("Summary of")
    assert summary.covered > 100  # most of the thread lives in the summary now
    assert len(deps.history.load(SESSION)) < 60  # the history it covers is gone
    shown = context_answer(deps)
    assert "8,000" in shown and "Summary of" in shown, shown
    # the next turn starts from the summary and the recent history
    last = fake.requests[-1].body["messages"]
    assert "Summary of" in last[0]["content"]
    assert last[-1]["content"].startswith("Alice: Turn 299:")


def test_a_window_smaller_than_believed_is_compacted_and_retried(redis_url: str) -> None:
    with FakeOpenAI(script(), context_window=5_000) as fake:
        deps = deps_for(redis_url, fake.base_url, window=32_000)  # fanbot believes 32k
        model = OpenAIChatModel(settings=deps.settings.openai)
        try:
            for i in range(40):
                reply = execute_turn(deps, model, turn(i, f"Turn {i}: " + WORDS * 6))
                assert reply.startswith("Noted ("), (i, reply)
        finally:
            model.close()
        assert fake.too_long >= 1  # the server said so
        assert refused_then_retried(fake)
        summary = deps.summaries.get(SESSION)
        assert summary is not None and summary.covered > 0


def test_a_thread_that_cannot_fit_is_answered_plainly(redis_url: str) -> None:
    """Even the latest message alone is over the window: a plain answer, no failure."""
    with FakeOpenAI(script(), context_window=300) as fake:
        deps = deps_for(redis_url, fake.base_url, window=32_000)
        model = OpenAIChatModel(settings=deps.settings.openai)
        try:
            reply = execute_turn(deps, model, turn(0, WORDS * 40))
        finally:
            model.close()
        assert "too long for the model" in reply
        # refused; nothing left to compact or trim would fit: said at once or after a retry
        assert 1 <= fake.too_long <= 3


def _system(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    return str(messages[0].get("content") or "")


def test_a_fan_in_over_20_long_results_fits_the_window_without_cutting_a_sentence(
    redis_url: str,
) -> None:
    from bot.models.tokens import count_messages
    from bot.models.window import window_for
    from bot.runs.finalize import finalize_run
    from bot.runs.join import continuation_prompt, open_join, plan_join
    from tests.integration.test_finalize import deps_for as bare_deps
    from tests.integration.test_finalize import make_run

    deps = bare_deps(
        redis_url,
        openai={
            "base_url": "http://127.0.0.1:9/v1",
            "model": "fake-model",
            "context_window": 8_000,
        },
    )
    plan = plan_join(deps.settings, turn(0, "compare them"))
    assert plan is not None and open_join(deps, plan)
    sentence = "Result {i} found that the release note number {n} reads well. "
    for i in range(1, 21):
        make_run(deps, f"r{i}", seq=i, label=f"L{i}", join_id=plan.join_id)
        result = "".join(sentence.format(i=i, n=n) for n in range(200))  # ~12k characters
        finalize_run(deps, f"r{i}", status=RunStatus.SUCCESS, result=result)
    join = deps.joins.get(plan.join_id)
    assert join is not None
    prompt = continuation_prompt(deps, join, history=[])  # no history note holds them
    win = window_for(deps.settings, "fake-model")
    assert win is not None
    used = count_messages([{"role": "user", "content": prompt}], model="fake-model")
    assert used <= win.room * 0.35  # its share of the window, with the statuses
    for i in range(1, 21):
        assert f"Result {i} found that the release note number 0 reads well." in prompt
    # each result ends at a sentence end: every kept sentence is whole
    for line in prompt.splitlines():
        if line.startswith("Result "):
            body = line.removesuffix(" …")
            assert body.endswith("reads well."), line


def test_the_fakes_window_answers_openais_own_context_length_exceeded() -> None:
    import openai

    from bot.config import OpenAISettings
    from bot.models.completion import CompletionRequest
    from bot.models.errors import Failure, failure_kind

    with FakeOpenAI(script(), context_window=50) as fake:
        model = OpenAIChatModel(
            settings=OpenAISettings(base_url=fake.base_url, model="fake-model", max_retries=0)
        )
        small = [{"role": "user", "content": "hi"}]
        big = [{"role": "user", "content": WORDS * 10}]
        try:
            assert model.complete(CompletionRequest(model="fake-model", messages=small)).content
            with pytest.raises(openai.BadRequestError) as caught:
                model.complete(CompletionRequest(model="fake-model", messages=big))
        finally:
            model.close()
        assert caught.value.status_code == 400
        assert caught.value.code == "context_length_exceeded"
        assert "maximum context length is 50 tokens" in caught.value.message
        assert failure_kind(caught.value) is Failure.CONTEXT_TOO_LONG
        assert fake.too_long == 1
        assert [r.status for r in fake.requests] == [200, 400]
        fake.reset()
        assert fake.too_long == 0


def test_context_before_any_compaction_and_with_an_unknown_window(redis_url: str) -> None:
    deps = deps_for(redis_url, "http://127.0.0.1:9/v1", window=None)
    deps.history.append(SESSION, {"role": "user", "content": "Alice: hello " + WORDS})
    shown = context_answer(deps)
    assert "1 recent message(s))" in shown
    assert "the model's window is unknown" in shown
    assert "No summary yet" in shown
    assert context_answer(deps, "/subagents context") == shown
    assert "Unknown command `/contex`" in context_answer(deps, "/contex")
    assert "`/context`" in context_answer(deps, "/help")
