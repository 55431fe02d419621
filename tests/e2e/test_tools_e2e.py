"""A subagent that acts, the way a person starts one: a message, a spawn, tools, an announce.

Forked workers, real Redis, a real local web page (allowed through
``FANBOT_WEB__ALLOW_HOSTS``), the real workspace and the real bubblewrap sandbox. The
scripted model drives the subagent through ``web_fetch`` -> ``write_file`` -> ``execute`` ->
an answer that quotes what the tools returned; the main agent then reads the same file from
the shared workspace.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from bot.testing import (
    Call,
    ChatRequest,
    FakeOpenAI,
    MemoryChannel,
    ScriptedModel,
    Stack,
    Text,
    ToolCalls,
    is_subagent,
    until,
)
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

ARTICLE = """<html><head><title>Otters</title></head><body><nav>Home | About</nav>
<article><h1>Why otters hold hands</h1><p>Sea otters hold hands while they sleep so that
they do not drift apart. This is called rafting, and rafts of more than a thousand otters
have been seen along the coast.</p><p>They also wrap themselves in kelp.</p></article>
<footer>(c) Otter facts</footer></body></html>"""


@pytest.fixture
async def page() -> AsyncIterator[str]:
    app = web.Application()

    async def article(_: web.Request) -> web.Response:
        return web.Response(text=ARTICLE, content_type="text/html")

    app.router.add_get("/otters", article)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/otters"
    await runner.cleanup()


def last_result(req: ChatRequest, tool: str) -> str:
    return next(r.content for r in reversed(req.tool_results) if r.name == tool)


def subagent_steps(url: str) -> Callable[[ChatRequest], Text | ToolCalls]:
    def step(req: ChatRequest) -> Text | ToolCalls:
        done = [r.name for r in req.tool_results]
        if "web_fetch" not in done:
            return ToolCalls([Call("web_fetch", {"url": url})])
        if "write_file" not in done:
            page = last_result(req, "web_fetch")
            return ToolCalls(
                [Call("write_file", {"file_path": "notes/otters.md", "content": page})]
            )
        if "execute" not in done:
            return ToolCalls([Call("execute", {"command": "grep -c rafting notes/otters.md"})])
        fetched = last_result(req, "web_fetch")
        ran = last_result(req, "execute")
        title = re.search(r"^# (.+)$", fetched, re.M)
        return Text(f"Title: {title.group(1) if title else '?'}\nexecute said: {ran}")

    return step


async def test_a_subagent_fetches_writes_and_runs_then_the_thread_sees_it(
    redis_url: str, page: str
) -> None:
    model = (
        ScriptedModel(default=Text("Done."))
        .on(is_subagent, subagent_steps(page))
        .on(
            "otters",
            ToolCalls([Call("sessions_spawn", {"task": "research otters", "label": "Otters"})]),
            times=1,
        )
        .on(
            "what did it write",
            ToolCalls([Call("read_file", {"file_path": "notes/otters.md"})]),
            times=1,
        )
    )
    values = stack_values(redis_url, "", web={"allow_hosts": ["127.0.0.1"]})
    channel = MemoryChannel()
    async with FakeOpenAI(model) as llm:
        values["openai"]["base_url"] = llm.base_url
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("look into otters")
            [announce] = await until(lambda: channel.announces, timeout=60)
            await channel.say("what did it write?")
            await stack.wait_for(lambda: len(llm.requests) >= 7, timeout=30)
            read = await until(
                lambda: [
                    r
                    for r in llm.requests
                    if "what did it write" in r.chat.last_user_message and r.chat.tool_results
                ],
                timeout=30,
            )
    text = announce.text
    assert text.startswith('✅ Subagent #1 "Otters"'), text
    assert "Title: Why otters hold hands" in text  # web_fetch: the article, as markdown
    assert "exit code 0" in text and "stdout:\n1\n" in text  # grep ran in the sandbox
    subagent = [r.chat for r in llm.requests if is_subagent(r.chat)]
    fetched = last_result(subagent[-1], "web_fetch")
    assert "rafting" in fetched and "Home | About" not in fetched  # main content only
    wrote = last_result(subagent[-1], "write_file")
    assert "notes/otters.md" in wrote
    # The main agent reads what its subagent wrote: one workspace per requester session.
    main_read = last_result(read[-1].chat, "read_file")
    assert "rafting" in main_read
    calls = [
        json.loads(c["function"]["arguments"])
        for r in subagent
        for m in r.messages
        for c in (m.get("tool_calls") or [])
    ]
    assert {"command": "grep -c rafting notes/otters.md"} in calls


async def test_a_subagent_searches_through_a_worker_and_announces_the_hits(redis_url: str) -> None:
    app = web.Application()
    asked: list[str] = []

    async def search(request: web.Request) -> web.Response:
        asked.append(request.query.get("q", ""))
        results = [{"title": "Sea otter", "url": "https://example.org/otter", "content": "Rafts"}]
        return web.json_response({"query": request.query.get("q"), "results": results})

    app.router.add_get("/search", search)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    searxng = f"http://127.0.0.1:{runner.addresses[0][1]}"

    def step(req: ChatRequest) -> Text | ToolCalls:
        if not req.tool_results:
            return ToolCalls([Call("web_search", {"query": "otter rafts", "count": 3})])
        return Text("Found: " + last_result(req, "web_search"))

    model = (
        ScriptedModel(default=Text("Done."))
        .on(is_subagent, step)
        .on(
            "search", ToolCalls([Call("sessions_spawn", {"task": "search", "label": "S"})]), times=1
        )
    )
    values = stack_values(redis_url, "", search={"provider": "searxng", "url": searxng})
    channel = MemoryChannel()
    try:
        async with FakeOpenAI(model) as llm:
            values["openai"]["base_url"] = llm.base_url
            async with Stack(values=values, adapters=[channel], workers=1):
                await channel.say("search for otters")
                [announce] = await until(lambda: channel.announces, timeout=60)
    finally:
        await runner.cleanup()
    assert asked == ["otter rafts"]  # the worker's web_search reached the provider
    assert "Found: <untrusted source=\"web_search\">\nResults for 'otter rafts' (searxng)" in (
        announce.text
    )  # the model saw the hits marked as data from outside, and echoed them
    assert "1. Sea otter\n   https://example.org/otter\n   Rafts" in announce.text
