"""The fake OpenAI server, driven by the real ``openai`` SDK (sync and async clients)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from bot.demo import demo_model
from bot.testing import until, wait_until
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Fail,
    Hang,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    has_tool,
    last_role,
    system_contains,
)
from bot.types import Usage

USER = [{"role": "user", "content": "hello there"}]
SPAWN_TOOL = {
    "type": "function",
    "function": {"name": "sessions_spawn", "parameters": {"type": "object", "properties": {}}},
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "current_time", "parameters": {"type": "object", "properties": {}}},
}
LONG_ARGS = {"task": "Compare Redis streams with Kafka for an outbox, in depth", "label": "R"}


def sync_client(fake: FakeOpenAI, **kwargs: object) -> OpenAI:
    return OpenAI(base_url=fake.base_url, api_key="x", **kwargs)


def async_client(fake: FakeOpenAI, **kwargs: object) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=fake.base_url, api_key="x", **kwargs)


def test_text_reply_sync_client_and_thread_runner() -> None:
    model = ScriptedModel(
        default=Text("Hi, human!", usage=Usage(prompt_tokens=7, completion_tokens=3))
    )
    with FakeOpenAI(model) as fake, sync_client(fake) as client:
        reply = client.chat.completions.create(model="fake-model", messages=USER)
        assert fake.base_url.startswith("http://127.0.0.1:") and fake.base_url.endswith("/v1")
    choice = reply.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hi, human!", "stop")
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 3)
    assert reply.usage.total_tokens == 10
    [record] = fake.requests
    assert record.body["messages"] == USER
    assert record.chat.last_user_message == "hello there"
    assert record.outcome == "ok" and record.status == 200
    assert record.finished_at is not None and record.finished_at >= record.started_at
    assert record.headers["authorization"] == "Bearer x"


async def test_streamed_text_with_usage() -> None:
    text = "Streaming works, token by token, until the end."
    model = ScriptedModel(default=Text(text))
    async with FakeOpenAI(model, stream_chunk_chars=5) as fake, async_client(fake) as client:
        stream = await client.chat.completions.create(
            model="fake-model",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    content_chunks, usage_chunk = chunks[:-1], chunks[-1]
    assert "".join(c.choices[0].delta.content or "" for c in content_chunks) == text
    assert len(content_chunks) > 3
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in content_chunks][-1] == "stop"
    assert all(c.usage is None for c in content_chunks)
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    # Estimated: ceil(chars / 4) for the prompt and for the answer.
    assert usage_chunk.usage.prompt_tokens == 3
    assert usage_chunk.usage.completion_tokens == (len(text) + 3) // 4


async def test_stream_without_include_usage_has_no_usage_chunk() -> None:
    async with FakeOpenAI() as fake, async_client(fake) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=USER,
            stream=True,
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ok"


async def test_streamed_tool_calls_assemble_like_openai() -> None:
    calls = [Call("sessions_spawn", LONG_ARGS), Call("current_time", {}), Call("bad", '{"x": ')]
    model = ScriptedModel().on(has_tool("sessions_spawn"), ToolCalls(calls, content="On it."))
    async with FakeOpenAI(model, stream_chunk_chars=7) as fake, async_client(fake) as client:
        stream = await client.chat.completions.create(
            model="fake-model",
            messages=USER,
            tools=[SPAWN_TOOL],
            stream=True,
        )
        assembled: dict[int, dict[str, str]] = {}
        deltas_per_call: dict[int, int] = {}
        content, finish = "", None
        async for chunk in stream:
            choice = chunk.choices[0]
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                slot = assembled.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                deltas_per_call[tc.index] = deltas_per_call.get(tc.index, 0) + 1
                if tc.id:
                    assert not slot["id"], "id only in the first delta of a call"
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
        # The SDK's own accumulator must agree.
        async with client.chat.completions.stream(
            model="fake-model",
            messages=USER,
            tools=[SPAWN_TOOL],
        ) as helper:
            final = await helper.get_final_completion()
    assert content == "On it." and finish == "tool_calls"
    assert [assembled[i]["name"] for i in range(3)] == ["sessions_spawn", "current_time", "bad"]
    assert json.loads(assembled[0]["arguments"]) == LONG_ARGS
    assert assembled[1]["arguments"] == "{}"
    assert assembled[2]["arguments"] == '{"x": '
    assert deltas_per_call[0] > 2  # arguments really were split across deltas
    assert len({slot["id"] for slot in assembled.values()}) == 3
    sdk_calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in sdk_calls] == [
        (name, args) for name, args in ((s["name"], s["arguments"]) for s in assembled.values())
    ]


def test_non_streamed_tool_calls() -> None:
    model = ScriptedModel().on(
        lambda req: True, ToolCalls([Call("sessions_spawn", LONG_ARGS, id="call_fixed")])
    )
    with FakeOpenAI(model) as fake, sync_client(fake) as client:
        reply = client.chat.completions.create(model="fake-model", messages=USER)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.id == "call_fixed" and call.type == "function"
    assert call.function.name == "sessions_spawn"
    assert json.loads(call.function.arguments) == LONG_ARGS


def test_429_then_success_honours_retry_after() -> None:
    # 1.2 s is above the SDK's first default backoff (<= 0.5 s), so the gap proves that
    # retry-after was honoured rather than the SDK's own schedule.
    model = ScriptedModel().on("hello", [Fail(429, retry_after=1.2), Text("after the wait")])
    with FakeOpenAI(model) as fake, sync_client(fake, max_retries=2) as client:
        reply = client.chat.completions.create(model="fake-model", messages=USER)
    assert reply.choices[0].message.content == "after the wait"
    first, second = fake.requests
    assert (first.status, second.status) == (429, 200)
    assert (first.retry_count, second.retry_count) == (0, 1)
    assert first.finished_at is not None
    assert second.started_at - first.finished_at >= 1.2


def test_429_error_shape_without_retries() -> None:
    with (
        FakeOpenAI(ScriptedModel(default=Fail(429, retry_after=0.1, message="slow down"))) as fake,
        sync_client(fake, max_retries=0) as client,
        pytest.raises(openai.RateLimitError) as info,
    ):
        client.chat.completions.create(model="fake-model", messages=USER)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "0.1"
    assert info.value.response.headers["retry-after-ms"] == "100"
    assert info.value.body == {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_500_three_times_exhausts_two_retries() -> None:
    with (
        FakeOpenAI(ScriptedModel(default=Fail(500, message="kaput"))) as fake,
        sync_client(fake, max_retries=2) as client,
        pytest.raises(openai.APIError) as info,
    ):
        client.chat.completions.create(model="fake-model", messages=USER)
    assert isinstance(info.value, openai.InternalServerError)
    assert "kaput" in info.value.message
    assert [r.retry_count for r in fake.requests] == [0, 1, 2]


async def test_hang_hits_client_timeout_and_the_fake_sees_the_disconnect() -> None:
    async with FakeOpenAI(ScriptedModel(default=Hang(60))) as fake:
        async with async_client(fake, timeout=0.5, max_retries=0) as client:
            with pytest.raises(openai.APITimeoutError):
                await client.chat.completions.create(model="fake-model", messages=USER)
        await until(lambda: fake.in_flight == 0, timeout=5)
        [record] = fake.requests
        assert record.outcome == "disconnected"
        assert fake.in_flight == 0


async def test_closing_the_fake_ends_pending_hangs() -> None:
    fake = await FakeOpenAI(ScriptedModel(default=Hang(600))).start()
    async with async_client(fake, max_retries=0) as client:
        call = asyncio.ensure_future(
            client.chat.completions.create(model="fake-model", messages=USER)
        )
        await until(lambda: fake.in_flight == 1, timeout=10)
        await fake.aclose()  # would take 600 s if the hang ignored shutdown
        with pytest.raises(openai.APIError):
            await call


async def test_concurrency_high_water_mark_and_overlap_by_kind() -> None:
    n = 6
    arrived = 0
    everyone_here = asyncio.Event()

    async def barrier(request: ChatRequest) -> Reply:
        nonlocal arrived
        arrived += 1
        if arrived == n:
            everyone_here.set()
        await everyone_here.wait()  # all n requests are in flight at once
        return Text("done")

    async with FakeOpenAI(barrier) as fake, async_client(fake) as client:

        async def ask(i: int) -> str | None:
            tools = [SPAWN_TOOL] if i % 2 else [TIME_TOOL]
            reply = await client.chat.completions.create(
                model="fake-model",
                messages=USER,
                tools=tools,
            )
            return reply.choices[0].message.content

        answers = await asyncio.gather(*(ask(i) for i in range(n)))
        # Afterwards, strictly one at a time.
        for _ in range(3):
            await ask(0)
    assert answers == ["done"] * n
    assert fake.max_concurrent == n
    assert fake.in_flight == 0
    assert fake.max_overlap() == n
    assert fake.max_overlap(lambda r: not r.chat.has_tool("sessions_spawn")) == n // 2
    assert fake.max_overlap(lambda r: r.index >= n) == 1


async def test_models_endpoints_and_strict_models() -> None:
    async with (
        FakeOpenAI(models=["gpt-fake", "tiny"], strict_models=True) as fake,
        async_client(fake, max_retries=0) as client,
    ):
        listed = [m.id async for m in client.models.list()]
        one = await client.models.retrieve("tiny")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nope")
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(model="nope", messages=USER)
        ok = await client.chat.completions.create(model="tiny", messages=USER)
    assert listed == ["gpt-fake", "tiny"]
    assert one.id == "tiny"
    assert info.value.code == "model_not_found"
    assert ok.model == "tiny"
    assert len(fake.requests) == 1  # rejected bodies are not recorded


async def test_bad_request_body_gets_openai_shaped_400() -> None:
    async with FakeOpenAI() as fake, aiohttp.ClientSession() as http:
        url = f"{fake.base_url}/chat/completions"
        async with http.post(url, data=b"{not json") as bad_json:
            assert bad_json.status == 400
            assert "error" in await bad_json.json()
        async with http.post(url, json={"model": "m", "messages": []}) as no_messages:
            assert no_messages.status == 400
            assert "messages" in (await no_messages.json())["error"]["message"]


def test_script_errors_become_500_with_the_reason() -> None:
    def broken(request: ChatRequest) -> Reply:
        raise KeyError("no such rule")

    def confused(request: ChatRequest) -> object:
        return None

    for script, reason in ((broken, "no such rule"), (confused, "returned None")):
        with (
            FakeOpenAI(script) as fake,
            sync_client(fake, max_retries=0) as client,
            pytest.raises(openai.InternalServerError, match=reason),
        ):
            client.chat.completions.create(model="fake-model", messages=USER)


def test_requests_from_another_process_are_recorded() -> None:
    code = (
        "import os; from openai import OpenAI\n"
        "with OpenAI(base_url=os.environ['FAKE_URL'], api_key='x') as c:\n"
        "    r = c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'pid'}])\n"
        "    print(r.choices[0].message.content)\n"
    )
    model = ScriptedModel().on("pid", Text("from the server process"))
    with FakeOpenAI(model) as fake:
        env = {**os.environ, "FAKE_URL": fake.base_url}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
    assert out.stdout.strip() == "from the server process"
    assert [r.chat.last_user_message for r in fake.requests] == ["pid"]


# --- ScriptedModel rules, through the wire ---------------------------------------------


def test_scripted_rules_lists_times_default_and_unmatched() -> None:
    model = (
        ScriptedModel()
        .on("twice", Text("again"), times=2)
        .on("seq", [Text("one"), Text("two")])
        .on("plain", "a plain string is Text")
        .on(system_contains("You are the reviewer"), Text("review"))
        .on(last_role("tool"), lambda req: Text(f"got {req.tool_results[-1].content}"))
    )

    def ask(client: OpenAI, messages: list[dict[str, object]]) -> str | None:
        reply = client.chat.completions.create(model="m", messages=messages)
        return reply.choices[0].message.content

    tool_turn = [
        {"role": "user", "content": "time?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    with FakeOpenAI(model) as fake, sync_client(fake, max_retries=0) as client:
        assert [ask(client, [{"role": "user", "content": "twice"}]) for _ in range(2)] == [
            "again",
            "again",
        ]
        assert [ask(client, [{"role": "user", "content": "seq"}]) for _ in range(2)] == [
            "one",
            "two",
        ]
        assert ask(client, [{"role": "user", "content": "plain"}]) == "a plain string is Text"
        system = {"role": "system", "content": "You are the reviewer."}
        assert ask(client, [system, {"role": "user", "content": "x"}]) == "review"
        assert ask(client, tool_turn) == "got 12:00"
        with pytest.raises(openai.InternalServerError, match="no rule matched"):
            ask(client, [{"role": "user", "content": "twice"}])  # used up
    assert model.calls(0) == 2 and model.calls(1) == 2
    assert [r.last_user_message for r in model.unmatched] == ["twice"]
    assert fake.requests[-2].chat.tool_results[0].name == "now"


async def test_async_script_and_delay() -> None:
    async def script(request: ChatRequest) -> Reply:
        await asyncio.sleep(0)
        return Text(request.model.upper(), delay=0.2)

    async with FakeOpenAI(script) as fake, async_client(fake) as client:
        reply = await client.chat.completions.create(model="abc", messages=USER)
    assert reply.choices[0].message.content == "ABC"
    [record] = fake.requests
    assert record.finished_at is not None and record.finished_at - record.started_at >= 0.2


# --- the offline demo model -------------------------------------------------------------


def test_demo_model_main_agent_flow() -> None:
    with FakeOpenAI(demo_model(subagent_delay=0)) as fake, sync_client(fake) as client:

        def main_turn(messages: list[dict[str, object]]) -> openai.types.chat.ChatCompletion:
            return client.chat.completions.create(
                model="m",
                messages=messages,
                tools=[SPAWN_TOOL],
            )

        greeting = main_turn([{"role": "user", "content": "hi"}]).choices[0].message
        ask = "Plan a migration of our outbox from Redis to Kafka"
        spawn = main_turn([{"role": "user", "content": ask}]).choices[0].message
        calls = spawn.tool_calls or []
        after = [
            {"role": "user", "content": ask},
            spawn.model_dump(exclude_none=True),
            *(
                {"role": "tool", "tool_call_id": c.id, "content": '{"status": "accepted"}'}
                for c in calls
            ),
        ]
        confirm = main_turn(after).choices[0].message
    assert greeting.content and "demo" in greeting.content and not greeting.tool_calls
    args = [json.loads(c.function.arguments) for c in calls]
    assert [c.function.name for c in calls] == ["sessions_spawn"] * 3
    assert [a["label"] for a in args] == ["Research", "Outline", "Review"]
    assert all(ask in a["task"] for a in args)
    assert confirm.content == "Started 3 subagents; I'll combine their results when they're done."


REFUSED = "error: invalid arguments for sessions_spawn: task: Value error, task is 31,990 characters long; at most 20,000 are allowed"


@pytest.mark.parametrize(
    ("answers", "said"),
    [
        (["accepted", "waiting_for_approval", "accepted"], ["Started 3 subagents; I'll combine"]),
        (
            ["accepted", REFUSED, "error: sessions_spawn: at most 2 runs per turn"],
            [
                "Started 1 subagent; 2 refused:",
                "- Outline: invalid arguments for sessions_spawn: task: Value error, task is "
                "31,990 characters long; at most 20,000 are allowed",
                "- Review: sessions_spawn: at most 2 runs per turn",
            ],
        ),
        (
            [REFUSED, REFUSED, REFUSED],
            ["No subagent started: all refused:", "- Research: invalid arguments", "- Review: "],
        ),
        (["not json at all", REFUSED, "{}"], ["No subagent started: all refused:"]),
    ],
)
def test_the_demo_counts_only_accepted_spawns_and_says_why_others_were_refused(
    answers: list[str], said: list[str]
) -> None:
    with FakeOpenAI(demo_model(subagent_delay=0)) as fake, sync_client(fake) as client:
        ask = [{"role": "user", "content": "Plan a migration of our outbox from Redis to Kafka"}]
        spawn = client.chat.completions.create(model="m", messages=ask, tools=[SPAWN_TOOL])
        message = spawn.choices[0].message
        results = [
            {"role": "tool", "tool_call_id": c.id, "content": _answer(a)}
            for c, a in zip(message.tool_calls or [], answers, strict=True)
        ]
        after = [*ask, message.model_dump(exclude_none=True), *results]
        reply = client.chat.completions.create(model="m", messages=after, tools=[SPAWN_TOOL])
    text = reply.choices[0].message.content or ""
    for part in said:
        assert part in text, text
    started = sum(a in ("accepted", "waiting_for_approval") for a in answers)
    assert text.count("\n- ") == len(answers) - started


def _answer(kind: str) -> str:
    if kind in ("accepted", "waiting_for_approval"):
        return json.dumps({"status": kind, "runId": "r1", "number": 1})
    return kind


async def test_demo_model_subagent_flow() -> None:
    task = "Research the key facts for: Kafka outbox"
    async with FakeOpenAI(demo_model(subagent_delay=0)) as fake, async_client(fake) as client:
        system = {"role": "system", "content": "You are a researcher subagent."}
        first = await client.chat.completions.create(
            model="m",
            messages=[system, {"role": "user", "content": task}],
            tools=[TIME_TOOL],
        )
        [call] = first.choices[0].message.tool_calls or []
        second = await client.chat.completions.create(
            model="m",
            messages=[
                system,
                {"role": "user", "content": task},
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "2026-01-01T12:00:00Z"},
            ],
            tools=[TIME_TOOL],
            stream=True,
        )
        result = "".join([c.choices[0].delta.content or "" async for c in second])
        no_tools = await client.chat.completions.create(
            model="m",
            messages=[system, {"role": "user", "content": task}],
        )
    assert call.function.name == "current_time"
    draft = first.choices[0].message.content or ""
    assert draft.startswith("**Draft** for: ") and task in draft  # a stop keeps it
    assert task in result and "- " in result
    assert "`/subagents list`" in result and "`fanbot subagents list --all`" in result
    assert "2026-01-01T12:00:00Z" in result
    assert no_tools.choices[0].message.content is not None
    assert task in no_tools.choices[0].message.content


def test_demo_model_is_deterministic() -> None:
    request = ChatRequest.from_body(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Write a release plan for v2"}],
            "tools": [SPAWN_TOOL],
        }
    )
    first, second = demo_model()(request), demo_model()(request)
    assert first == second
    assert isinstance(first, ToolCalls)


def test_demo_model_drops_the_speaker_prefix_of_a_turn() -> None:
    def answer(text: str) -> Reply:
        messages = [{"role": "user", "content": text}]
        body = {"model": "m", "messages": messages, "tools": [SPAWN_TOOL]}
        reply = demo_model()(ChatRequest.from_body(body))
        assert not isinstance(reply, Awaitable)
        return reply

    spawn = answer("you: compare redis streams and kafka")
    assert isinstance(spawn, ToolCalls)
    tasks = [json.loads(call.arguments_json())["task"] for call in spawn.calls]
    assert all(t.endswith(": compare redis streams and kafka") for t in tasks), tasks
    assert not any("you:" in t for t in tasks)
    assert isinstance(answer("alice: hi"), Text)  # a greeting, with or without a speaker


def test_thread_runner_stop_ends_a_pending_hang() -> None:
    fake = FakeOpenAI(ScriptedModel(default=Hang(600))).start_in_thread()
    errors: list[openai.APIError] = []

    def call() -> None:
        with sync_client(fake, max_retries=0) as client:
            try:
                client.chat.completions.create(model="m", messages=USER)
            except openai.APIError as exc:
                errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: fake.in_flight == 1, timeout=10)
    fake.stop()  # would sit out the 600 s hang (then pytest-timeout) if hangs ignored it
    caller.join(timeout=60)
    assert not caller.is_alive()
    assert len(errors) == 1
    with pytest.raises(RuntimeError, match="start_in_thread"):
        fake.stop()
