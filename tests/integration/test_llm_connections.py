"""One :class:`bot.agent.llm.OpenAIChatModel` keeps its HTTP connection across streamed
completions (the SDK closes a stream's response before its body ends), except where a stop
cut it or its body would not end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import openai
import pytest

from bot.agent.completion import CompletionRequest
from bot.agent.llm import OpenAIChatModel, _cutter, fold_stream
from bot.config import OpenAISettings
from bot.supervise.abort import Abort, Aborted, running
from bot.testing import wait_until
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, Fail, ScriptedModel, Text, ToolCalls
from bot.types import Usage

SLOW = Text("x" * 400, chunk_delay=0.05)  # 50 chunks of 8 chars, 2.5 s


def script() -> ScriptedModel:
    return (
        ScriptedModel(default=Text("ok", usage=Usage(prompt_tokens=3, completion_tokens=1)))
        .on("tool", ToolCalls([Call("current_time", {"zone": "UTC"})]))
        .on("long", Text("y" * 1500, usage=Usage(prompt_tokens=5, completion_tokens=50)))
        .on("bad", Fail(400, message="no"))
        .on("slow", SLOW)
    )


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(script()) as fake:
        yield fake


@pytest.fixture
def model(fake: FakeOpenAI) -> Iterator[OpenAIChatModel]:
    settings = OpenAISettings(
        base_url=fake.base_url, model="fake-model", max_retries=0, max_reply_chars=1000
    )
    model = OpenAIChatModel(settings=settings)
    yield model
    model.close()


def ask(
    text: str,
    *,
    on_text: Callable[[int], None] | None = None,
    on_chunk: Callable[[], None] | None = None,
) -> CompletionRequest:
    messages = [{"role": "user", "content": text}]
    return CompletionRequest(
        model="fake-model", messages=messages, on_text=on_text, on_chunk=on_chunk
    )


def test_sequential_completions_share_one_connection(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    first = model.complete(ask("hi"))
    tool = model.complete(ask("tool please"))
    long = model.complete(ask("long one"))  # past max_reply_chars: read to the end, cut
    with pytest.raises(openai.BadRequestError):
        model.complete(ask("bad one"))
    last = model.complete(ask("hi again"))

    assert (first.content, first.usage) == ("ok", Usage(prompt_tokens=3, completion_tokens=1))
    assert [(c.name, c.arguments) for c in tool.tool_calls] == [("current_time", '{"zone": "UTC"}')]
    assert long.content.startswith("y" * 1000) and long.cut_chars == 500
    assert long.usage == Usage(prompt_tokens=5, completion_tokens=50)
    assert last.content == "ok"
    # The fake records a stream "ok" once its handler has written the end, which may come a
    # moment after the client has read it.
    deadline = time.monotonic() + 5
    while fake.requests[-1].outcome == "in_flight" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.outcome for r in fake.requests] == ["ok", "ok", "ok", "error", "ok"]
    assert fake.connections == 1


def test_a_stopped_streams_connection_is_not_reused(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    stop = Abort()
    streaming = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        with running(stop):
            try:
                model.complete(ask("slow", on_text=lambda _n: streaming.set()))
            except BaseException as exc:
                failure.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert streaming.wait(10)
    started = time.monotonic()
    assert stop.abort("stop") == 1
    runner.join(10)
    assert time.monotonic() - started < 1.0  # cut, not read to its end
    assert [type(exc) for exc in failure] == [Aborted]
    wait_until(lambda: fake.requests[0].outcome == "disconnected")

    assert model.complete(ask("hi")).content == "ok"
    assert [r.connection for r in fake.requests] == [0, 1]


def test_a_cut_after_the_end_leaves_the_pooled_connection_alone(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    stream = model.client.chat.completions.create(
        model="fake-model",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    cut = _cutter(stream)
    assert fold_stream(stream, limit=100).content == "ok"
    cut()  # a stop arriving late: the connection is back in the pool, maybe in use
    assert model.complete(ask("hi")).content == "ok"
    assert fake.connections == 1


def test_a_body_that_does_not_end_soon_is_closed_with_its_connection(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    def give_up() -> None:
        raise RuntimeError("enough")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="enough"):
        model.complete(ask("slow", on_chunk=give_up))
    assert time.monotonic() - started < 1.0  # the rest (2.5 s of it) was not waited for

    assert model.complete(ask("hi")).content == "ok"
    assert [r.connection for r in fake.requests] == [0, 1]
