"""web_search against local servers that speak each provider's real wire format.

The answers below have the shape of the providers' real JSON (fields we ignore included),
so a parser that leans on a field that is not there fails here first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from bot.agent.tools import execute_tool
from bot.agent.tools.search import Searcher, clean
from bot.agent.tools.web import web_tools
from bot.config import Settings
from tests.integration.web_support import serve, tool_context

KEY = "test-key-123"
RESULTS = [
    ("Otter - Wikipedia", "https://en.wikipedia.org/wiki/Otter", "Otters are carnivorous mammals"),
    ("Sea otter facts", "https://example.org/sea-otters", "Sea otters hold hands &amp; sleep"),
    ("Otter rafting", "https://example.net/rafting", "Groups of otters are called rafts"),
]


def searxng_answer(query: str) -> dict[str, Any]:
    return {
        "query": query,
        "number_of_results": 0,
        "results": [
            {
                "url": url,
                "title": title,
                "content": snippet,
                "engine": "duckduckgo",
                "parsed_url": ["https", url.split("/")[2], "/" + url.split("/", 3)[-1], "", "", ""],
                "template": "default.html",
                "engines": ["duckduckgo", "brave"],
                "positions": [i + 1],
                "publishedDate": None,
                "score": 2.0 / (i + 1),
                "category": "general",
            }
            for i, (title, url, snippet) in enumerate(RESULTS)
        ],
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": ["otter species"],
        "unresponsive_engines": [],
    }


def brave_answer(query: str, count: int) -> dict[str, Any]:
    results = [
        {
            "title": title,
            "url": url,
            "is_source_local": False,
            "is_source_both": False,
            "description": snippet.replace("Otters", "<strong>Otters</strong>"),
            "page_age": "2024-05-01T00:00:00",
            "profile": {"name": "Wikipedia", "url": url, "long_name": "wikipedia.org", "img": ""},
            "language": "en",
            "family_friendly": True,
            "type": "search_result",
            "subtype": "generic",
            "meta_url": {
                "scheme": "https",
                "netloc": url.split("/")[2],
                "hostname": url.split("/")[2],
            },
            "age": "May 1, 2024",
        }
        for title, url, snippet in RESULTS[:count]
    ]
    return {
        "query": {"original": query, "show_strict_warning": False, "is_navigational": False},
        "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": False}]},
        "type": "search",
        "web": {"type": "search", "results": results, "family_friendly": True},
    }


def tavily_answer(query: str, count: int) -> dict[str, Any]:
    return {
        "query": query,
        "follow_up_questions": None,
        "answer": None,
        "images": [],
        "results": [
            {
                "url": url,
                "title": title,
                "content": snippet,
                "score": 0.9 - i / 10,
                "raw_content": None,
            }
            for i, (title, url, snippet) in enumerate(RESULTS[:count])
        ],
        "response_time": 1.07,
        "request_id": "123e4567-e89b-12d3-a456-426614174111",
    }


def providers(seen: list[dict[str, Any]]) -> web.Application:
    async def searxng(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        if request.query.get("format") != "json":
            raise web.HTTPForbidden()  # what SearXNG does when JSON output is not enabled
        return web.json_response(searxng_answer(request.query["q"]))

    async def brave(request: web.Request) -> web.Response:
        seen.append({**request.query, "token": request.headers.get("X-Subscription-Token")})
        if request.headers.get("X-Subscription-Token") != KEY:
            error = {"id": "x", "status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID"}
            return web.json_response({"type": "ErrorResponse", "error": error}, status=401)
        return web.json_response(brave_answer(request.query["q"], int(request.query["count"])))

    async def tavily(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({**body, "auth": request.headers.get("Authorization")})
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            detail = {"error": "Unauthorized: missing or invalid API key."}
            return web.json_response({"detail": detail}, status=401)
        return web.json_response(tavily_answer(body["query"], body["max_results"]))

    async def limited(request: web.Request) -> web.Response:
        return web.json_response({"error": "rate limited"}, status=429)

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>oops</html>", content_type="text/html")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/search", searxng)
    app.router.add_get("/res/v1/web/search", brave)
    app.router.add_post("/search", tavily)
    for prefix, handler in (("/limited", limited), ("/garbage", garbage), ("/slow", slow)):
        app.router.add_get(prefix + "/search", handler)
    return app


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    async with serve(providers(seen)) as port:
        yield f"http://127.0.0.1:{port}", seen


async def search(search_settings: dict[str, Any], **args: Any) -> str:
    s = Settings(search=search_settings)
    tools = {t.name: t for t in web_tools(s)}
    arguments = json.dumps(args)
    return await asyncio.to_thread(
        execute_tool,
        tools,
        name="web_search",
        arguments=arguments,
        ctx=tool_context(s),
        max_chars=20_000,
    )


async def test_searxng(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = server
    out = await search({"provider": "searxng", "url": base}, query="otters", count=2)
    assert out == (
        "Results for 'otters' (searxng):\n"
        "\n1. Otter - Wikipedia\n   https://en.wikipedia.org/wiki/Otter\n   Otters are carnivorous mammals\n"
        "\n2. Sea otter facts\n   https://example.org/sea-otters\n   Sea otters hold hands & sleep"
    )
    assert seen == [{"q": "otters", "format": "json"}]


async def test_brave(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = server
    out = await search({"provider": "brave", "url": base, "api_key": KEY}, query="otters")
    assert (
        "1. Otter - Wikipedia\n   https://en.wikipedia.org/wiki/Otter\n   Otters are carnivorous"
        in out
    )
    assert "<strong>" not in out and "3. Otter rafting" in out
    assert seen == [{"q": "otters", "count": "5", "token": KEY}]


async def test_tavily(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = server
    out = await search({"provider": "tavily", "url": base, "api_key": KEY}, query="otters", count=1)
    assert out.endswith(
        "1. Otter - Wikipedia\n   https://en.wikipedia.org/wiki/Otter\n   Otters are carnivorous mammals"
    )
    assert seen == [
        {"query": "otters", "max_results": 1, "search_depth": "basic", "auth": f"Bearer {KEY}"}
    ]


async def test_count_is_capped_by_max_results(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, seen = server
    settings = {"provider": "brave", "url": base, "api_key": KEY, "max_results": 2}
    out = await search(settings, query="otters", count=20)
    assert "2. Sea otter facts" in out and "3." not in out
    assert seen[0]["count"] == "2"


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"provider": "brave", "api_key": "wrong"}, "error: brave refused the request (HTTP 401)"),
        (
            {"provider": "tavily", "api_key": "wrong"},
            "error: tavily refused the request (HTTP 401)",
        ),
        (
            {"provider": "searxng", "path": "/limited"},
            "error: searxng is rate limiting searches (HTTP 429); try again later",
        ),
        (
            {"provider": "searxng", "path": "/garbage"},
            "error: searxng answered with something other than JSON",
        ),
        (
            {"provider": "searxng", "path": "/slow", "timeout_seconds": 0.3},
            "error: searxng did not answer within 0.3 s",
        ),
    ],
)
async def test_provider_failures_are_short_texts(
    server: tuple[str, list[dict[str, Any]]], settings: dict[str, Any], error: str
) -> None:
    base, _ = server
    given = {k: v for k, v in settings.items() if k != "path"}
    settings = {**given, "url": base + settings.get("path", "")}
    assert await search(settings, query="otters") == error


async def test_no_results() -> None:
    async def empty(request: web.Request) -> web.Response:
        return web.json_response({"query": "zzz", "results": [], "answers": [], "infoboxes": []})

    app = web.Application()
    app.router.add_get("/search", empty)
    async with serve(app) as port:
        out = await search({"provider": "searxng", "url": f"http://127.0.0.1:{port}"}, query="zzz")
    assert out == "no results for 'zzz' (searxng)"


def test_defaults_and_snippet_cleaning() -> None:
    brave = Searcher.from_settings(Settings(search={"provider": "brave", "api_key": "k"}).search)
    assert brave.url("/res/v1/web/search") == "https://api.search.brave.com/res/v1/web/search"
    tavily = Searcher.from_settings(Settings(search={"provider": "tavily", "api_key": "k"}).search)
    assert tavily.url("/search") == "https://api.tavily.com/search"
    assert clean("a <strong>b</strong>\n &amp; c") == "a b & c"
    assert clean("x" * 1000, 10) == "x" * 9 + "…"
