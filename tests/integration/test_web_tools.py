"""web_fetch and web_search against real HTTP servers on loopback.

The servers are aiohttp apps in the test's event loop; the tools are synchronous (they run
in a worker's work horse), so each call runs in a thread. ``FANBOT_WEB__ALLOW_HOSTS`` is
127.0.0.1 here: the test servers are the exempt intranet, everything else is judged.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.agent.tools import Tool, execute_tool
from bot.agent.tools.fetch import Fetcher
from bot.agent.tools.ssrf import IPAddress
from bot.agent.tools.toolbox import all_tools
from bot.agent.tools.web import web_tools
from bot.config import Settings
from tests.integration.web_support import make_authority, serve, tool_context

ARTICLE = """<!doctype html><html><head><title>Otters | Nature Daily</title></head><body>
<nav><a href="/">Home</a> · <a href="/subscribe">Subscribe to our newsletter</a></nav>
<article><h1>Why otters hold hands</h1>
<p>Sea otters hold hands while they sleep so that they do not drift apart. The behaviour is
called <b>rafting</b>, and groups of more than a thousand animals have been seen.</p>
<h2>Kelp anchors</h2>
<p>They also wrap themselves in kelp, which keeps them in place in strong currents. See the
<a href="https://example.org/kelp">kelp survey</a> for the numbers.</p>
<ul><li>Rafts form at dusk</li><li>Mothers carry pups on their bellies</li></ul>
</article>
<footer>© 2024 Nature Daily · Cookie settings · Privacy policy</footer></body></html>"""


def tiny_pdf(*pages: str) -> bytes:
    """A valid PDF with one line of Helvetica text per page, written by hand."""
    count = len(pages)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(count))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    font = 3 + 2 * count
    for i, text in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


# --- the site --------------------------------------------------------------------------


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(10)
    return web.Response(text="too late")


async def drip(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    for _ in range(200):
        await response.write(b"tick\n")
        await asyncio.sleep(0.1)
    return response


async def hops(request: web.Request) -> web.Response:
    left = int(request.match_info["n"])
    target = "/plain" if left == 0 else f"/hops/{left - 1}"
    raise web.HTTPFound(target)


async def redirect_to(request: web.Request) -> web.Response:
    raise web.HTTPFound(request.query["url"])


def site() -> web.Application:
    app = web.Application()

    def fixed(body: bytes | str, content_type: str) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.Response:
            data = body.encode() if isinstance(body, str) else body
            return web.Response(body=data, headers={"Content-Type": content_type})

        return handler

    app.router.add_get("/article", fixed(ARTICLE, "text/html; charset=utf-8"))
    app.router.add_get("/data.json", fixed('{"otters": 3, "kelp": true}', "application/json"))
    app.router.add_get("/plain", fixed("just some text\nline two\n", "text/plain"))
    app.router.add_get(
        "/doc.pdf", fixed(tiny_pdf("Hello from page one", "Page two"), "application/pdf")
    )
    app.router.add_get("/big", fixed(b"x" * 3_000_000, "text/plain"))
    app.router.add_get("/image", fixed(b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"))
    app.router.add_get("/long", fixed("word " * 10_000, "text/plain"))
    app.router.add_get("/slow", slow)
    app.router.add_get("/drip", drip)
    app.router.add_get("/hops/{n}", hops)
    app.router.add_get("/to", redirect_to)
    return app


def settings(**web_overrides: Any) -> Settings:
    return Settings(web={"allow_hosts": ["127.0.0.1"], **web_overrides})


async def call(tools: list[Tool], name: str, s: Settings, limit: int = 50_000, **args: Any) -> str:
    """One tool call as the model makes it: JSON arguments, through execute_tool."""
    by_name = {t.name: t for t in tools}
    ctx = tool_context(s)
    return await asyncio.to_thread(
        execute_tool, by_name, name=name, arguments=json.dumps(args), ctx=ctx, max_chars=limit
    )


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with serve(site()) as p:
        yield p


async def fetch(port: int, path: str, s: Settings | None = None, **args: Any) -> str:
    s = s or settings()
    return await call(web_tools(s), "web_fetch", s, url=f"http://127.0.0.1:{port}{path}", **args)


# --- web_fetch ---------------------------------------------------------------------------


async def test_an_html_article_becomes_markdown_of_its_main_content(port: int) -> None:
    out = await fetch(port, "/article")
    assert out.startswith(f"URL: http://127.0.0.1:{port}/article\nStatus: 200 · text/html · ")
    assert "# Why otters hold hands" in out
    assert "called **rafting**" in out
    assert "## Kelp anchors" in out
    assert "[kelp survey](https://example.org/kelp)" in out
    assert "- Rafts form at dusk" in out
    assert "Cookie settings" not in out and "Subscribe to our newsletter" not in out


async def test_json_and_plain_text_come_back_as_they_are(port: int) -> None:
    assert (await fetch(port, "/data.json")).endswith('\n\n{"otters": 3, "kelp": true}')
    assert (await fetch(port, "/plain")).endswith("\n\njust some text\nline two")


async def test_a_pdf_becomes_its_text(port: int) -> None:
    out = await fetch(port, "/doc.pdf")
    assert "Status: 200 · application/pdf" in out
    assert "(PDF, 2 pages)\n\nHello from page one\n\nPage two" in out


async def test_binary_content_is_refused_in_words(port: int) -> None:
    assert await fetch(port, "/image") == "error: refused: image/png content is not text (72 bytes)"


async def test_an_oversized_body_is_cut_at_max_bytes_with_a_note(port: int) -> None:
    s = settings(max_bytes=100_000)
    out = await fetch(port, "/big", s, max_chars=200)
    assert "Status: 200 · text/plain · 100,000 bytes" in out
    assert "Note: the body was cut at 100,000 bytes" in out
    assert out.endswith(
        "x" * 200 + "\n[… characters 0–200 of 100,000; call again with start=200 for more]"
    )


async def test_a_long_text_is_read_in_parts(port: int) -> None:
    out = await fetch(port, "/long", max_chars=1000)
    assert out.endswith("\n[… characters 0–1,000 of 49,999; call again with start=1000 for more]")
    last = await fetch(port, "/long", max_chars=2000, start=49_000)
    assert last.endswith("word\n[… characters 49,000–49,999 of 49,999]")
    past = await fetch(port, "/long", start=60_000)
    assert past.endswith("\n\n(nothing from character 60,000: the text has 49,999 characters)")


async def test_max_chars_is_capped_by_the_settings(port: int) -> None:
    capped = await fetch(port, "/long", settings(max_chars=5_000), max_chars=900_000)
    assert capped.endswith("[… characters 0–5,000 of 49,999; call again with start=5000 for more]")
    # Every tool result is cut to subagents.max_result_chars: a call never asks past it.
    s = Settings(web={"allow_hosts": ["127.0.0.1"]}, subagents={"max_result_chars": 3_000})
    small = await fetch(port, "/long", s, max_chars=900_000)
    assert small.endswith("[… characters 0–2,000 of 49,999; call again with start=2000 for more]")


async def test_a_slow_server_is_a_timeout_text(port: int) -> None:
    started = time.monotonic()
    out = await fetch(port, "/slow", settings(timeout_seconds=0.5))
    assert out == f"error: timed out after 0.5 s fetching http://127.0.0.1:{port}/slow"
    assert time.monotonic() - started < 2


async def test_a_dripping_body_is_cut_when_the_whole_fetch_is_out_of_time(port: int) -> None:
    started = time.monotonic()
    out = await fetch(port, "/drip", settings(timeout_seconds=1.0))
    assert time.monotonic() - started < 2.5
    assert "Note: the download was cut after 1 s" in out
    assert "tick\ntick" in out


async def test_five_redirects_are_followed_and_a_sixth_is_refused(port: int) -> None:
    out = await fetch(port, "/hops/4")  # /hops/4 → … → /hops/0 → /plain: five redirects
    assert out.startswith(f"URL: http://127.0.0.1:{port}/plain (after 5 redirects)")
    out = await fetch(port, "/hops/5")
    assert out == f"error: refused: more than 5 redirects (next: http://127.0.0.1:{port}/plain)"


@pytest.mark.parametrize(
    ("location", "error"),
    [
        ("http://10.0.0.1/admin", "error: refused: 10.0.0.1 is a private address"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "error: refused: 169.254.169.254 is a cloud metadata address",
        ),
        (
            "http://[::ffff:127.0.0.2]/",
            "error: refused: ::ffff:7f00:2 (that is 127.0.0.2) is a loopback address",
        ),
        (
            "http://inward.test/",
            "error: refused: inward.test resolves to 127.0.0.2, a loopback address",
        ),
        ("file:///etc/passwd", "error: refused: only http and https URLs are fetched"),
        ("http://admin:pw@127.0.0.1/", "error: refused: URLs with credentials"),
    ],
)
async def test_a_redirect_inward_is_refused_before_connecting(
    port: int, location: str, error: str
) -> None:
    looked_up: list[str] = []

    def resolver(host: str, p: int) -> list[IPAddress]:
        looked_up.append(host)
        return [ipaddress.ip_address("127.0.0.2")]

    s = settings()
    fetcher = Fetcher.from_settings(s.web, resolver=resolver)
    url = f"http://127.0.0.1:{port}/to?url={location}"
    out = await call(web_tools(s, fetcher=fetcher), "web_fetch", s, url=url)
    assert out.startswith(error)
    assert looked_up == (["inward.test"] if "inward" in location else [])


async def test_dns_rebinding_cannot_move_the_connection() -> None:
    """The name resolves first to an allowed address (the real server), then to a refused
    one (the attacker's, on 127.0.0.2). The fetch asks once and connects where it checked."""
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2"])
    looked_up: list[str] = []

    def rebinding(host: str, p: int) -> list[IPAddress]:
        looked_up.append(host)
        return [ipaddress.ip_address(next(answers))]

    seen = {"good": 0, "evil": 0}

    def app(name: str) -> web.Application:
        async def who(request: web.Request) -> web.Response:
            seen[name] += 1
            return web.Response(text=f"{name} server; Host: {request.host}")

        application = web.Application()
        application.router.add_get("/who", who)
        return application

    async with serve(app("good")) as p, serve(app("evil"), host="127.0.0.2", port=p):
        s = settings()
        fetcher = Fetcher.from_settings(s.web, resolver=rebinding)
        url = f"http://rebind.test:{p}/who"
        page = await asyncio.to_thread(fetcher.fetch, url)
        again = await call(web_tools(s, fetcher=fetcher), "web_fetch", s, url=url)
    assert page.body == f"good server; Host: rebind.test:{p}".encode()
    assert page.peer == "127.0.0.1"
    # The next fetch asks again, is told 127.0.0.2, and refuses before connecting.
    assert again == "error: refused: rebind.test resolves to 127.0.0.2, a loopback address"
    assert seen == {"good": 1, "evil": 0}
    assert looked_up == ["rebind.test", "rebind.test"]  # once per fetch, never per connection


async def test_https_is_pinned_with_the_host_name_for_sni_and_certificate(tmp_path: Path) -> None:
    server_tls, client_tls, sni = make_authority(tmp_path)

    def loopback(host: str, p: int) -> list[IPAddress]:
        return [ipaddress.ip_address("127.0.0.1")]

    async with serve(site(), tls=server_tls) as p:
        s = settings()
        fetcher = Fetcher.from_settings(s.web, resolver=loopback, tls=client_tls)
        tools = web_tools(s, fetcher=fetcher)
        good = await call(tools, "web_fetch", s, url=f"https://pinned.test:{p}/plain")
        wrong = await call(tools, "web_fetch", s, url=f"https://other.test:{p}/plain")
    assert good.endswith("just some text\nline two")
    assert wrong.startswith("error: cannot connect to other.test: [SSL: CERTIFICATE_VERIFY_FAILED]")
    assert "Hostname mismatch" in wrong
    assert sni == ["pinned.test", "other.test"]


def test_web_fetch_is_offered_by_default_and_web_search_only_when_configured() -> None:
    names = [t.name for t in all_tools(Settings())]
    assert "web_fetch" in names and "web_search" not in names
    configured = Settings(search={"provider": "searxng", "url": "http://127.0.0.1:9"})
    assert "web_search" in [t.name for t in all_tools(configured)]


async def test_bad_arguments_are_explained(port: int) -> None:
    s = settings()
    out = await call(web_tools(s), "web_fetch", s, url="")
    assert out.startswith(
        "error: invalid arguments for web_fetch: url: String should have at least 1"
    )
