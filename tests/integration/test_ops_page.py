"""The ops page over HTTP against real Redis: off without a token, sign-in, and the replay
refused (401/403, nothing changed) unless admin, same-origin and carrying the CSRF token."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
import redis
from aiohttp import web

from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ops import ops_routes
from bot.testing.netutil import LOOPBACK, bind_loopback
from bot.types import Outbound, OutboundKind, RunRecord, RunStatus, ThreadRef

VIEW = "view-token-0123456789"
ADMIN = "admin-token-0123456789"
THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.1")


@dataclass
class Served:
    url: str
    origin: str
    deps: Deps

    def dead(self) -> list[str]:
        return [i.decode() for i, _ in self.deps.redis.xrange(self.deps.keys.dead_letter)]

    def outbox_len(self) -> int:
        return int(self.deps.redis.xlen(self.deps.keys.outbox))


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    settings = Settings(redis_url=redis_url, ops={"token": VIEW, "admin_token": ADMIN})
    deps = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    app = web.Application()
    app.add_routes(ops_routes(settings, deps))
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_loopback()
    origin = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
    await web.SockSite(runner, sock).start()
    try:
        yield Served(url=f"{origin}/ops", origin=origin, deps=deps)
    finally:
        await runner.cleanup()
        deps.close()


def put_dead_letter(deps: Deps, text: str = "lost announce") -> str:
    message = Outbound(
        thread=THREAD, text=text, kind=OutboundKind.ANNOUNCE, idempotency_key="announce:r1"
    )
    fields = {"data": json.dumps(message.to_json()), "reason": "permanent: 403", "entry_id": "9-0"}
    return str(deps.redis.xadd(deps.keys.dead_letter, fields).decode())  # type: ignore[union-attr]


async def get(url: str, **kw: object) -> tuple[int, str, aiohttp.ClientResponse]:
    async with aiohttp.ClientSession() as http, http.get(url, **kw) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.text(), resp


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_page_is_off_without_a_token() -> None:
    assert ops_routes(Settings(), Deps.build(Settings(), client=redis.Redis())) == []


async def test_without_a_token_the_sign_in_form_answers_401(served: Served) -> None:
    status, body, resp = await get(served.url)
    assert status == 401 and 'name="token"' in body and 'type="password"' in body
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    status, body, _ = await get(served.url, headers=bearer("wrong-token-0123456789"))
    assert status == 401 and "Wrong token." in body


async def test_a_viewer_sees_runs_queues_and_dead_letters_but_no_replay_form(
    served: Served,
) -> None:
    served.deps.runs.create(
        RunRecord(
            run_id="run-aaaa-1",
            seq=3,
            session_key="agent:main:slack:C1:thread:1.1",
            child_session_key="agent:main:subagent:x",
            session_id="s1",
            thread=THREAD,
            requester="U1",
            agent_id="main",
            subagent_type="general-purpose",
            task="<b>look</b> things up",
            model="gpt-x",
            status=RunStatus.QUEUED,
            created_at=time.time() - 5,
            job_id="run-aaaa-1",
        )
    )
    put_dead_letter(served.deps)
    status, body, resp = await get(served.url, headers=bearer(VIEW))
    assert status == 200
    assert 'data-run="run-aaaa-1"' in body and "#3 &lt;b&gt;look&lt;/b&gt; things up" in body
    assert 'data-queue="subagents"' in body and 'data-queue="turns"' in body
    assert "lost announce" in body and "ops/replay" not in body
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert resp.headers["Cache-Control"] == "no-store"


async def test_sign_in_sets_an_httponly_samesite_strict_cookie(served: Served) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        headers = {"Origin": served.origin}
        async with http.post(
            f"{served.url}/login", data={"token": "nope"}, headers=headers
        ) as resp:
            assert resp.status == 401 and "Wrong token." in await resp.text()
        async with http.post(
            f"{served.url}/login",
            data={"token": ADMIN},
            headers=headers,
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303 and resp.headers["Location"] == "../ops"
            cookie = resp.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ops" in cookie
        assert ADMIN not in cookie
        async with http.get(served.url) as resp:
            body = await resp.text()
        assert resp.status == 200 and "admin" in body and "Sign out" in body
        async with http.post(
            f"{served.url}/logout", headers=headers, allow_redirects=False
        ) as resp:
            assert resp.status == 303 and "Max-Age=0" in resp.headers["Set-Cookie"]
        async with http.get(served.url) as resp:
            assert resp.status == 401  # signed out
        async with http.post(
            f"{served.url}/login", data={"token": ADMIN}, headers={"Origin": "http://evil"}
        ) as resp:
            assert resp.status == 403


async def admin_csrf(served: Served) -> str:
    _, body, _ = await get(served.url, headers=bearer(ADMIN))
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', body)
    assert found is not None, body
    return found[1]


@pytest.mark.parametrize(
    ("who", "origin", "csrf", "status", "reason"),
    [
        (None, "same", "good", 401, "not signed in"),
        ("wrong-token-0123456789", "same", "good", 401, "not signed in"),
        (VIEW, "same", "good", 403, "admin token"),
        (ADMIN, None, "good", 403, "no Origin"),
        (ADMIN, "http://evil.example", "good", 403, "another origin"),
        (ADMIN, "same", None, 403, "CSRF"),
        (ADMIN, "same", "forged", 403, "CSRF"),
    ],
)
async def test_a_replay_is_refused_and_changes_nothing(
    served: Served,
    who: str | None,
    origin: str | None,
    csrf: str | None,
    status: int,
    reason: str,
) -> None:
    entry = put_dead_letter(served.deps)
    form = {"entry": entry}
    if csrf is not None:
        form["csrf"] = await admin_csrf(served) if csrf == "good" else "f" * 64
    headers = bearer(who) if who else {}
    if origin is not None:
        headers["Origin"] = served.origin if origin == "same" else origin
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{served.url}/replay", data=form, headers=headers) as resp,
    ):
        body = await resp.text()
    assert resp.status == status and reason in body
    assert served.dead() == [entry] and served.outbox_len() == 0


async def test_an_admin_replays_one_dead_letter_then_the_rest(served: Served) -> None:
    first, second = put_dead_letter(served.deps, "one"), put_dead_letter(served.deps, "two")
    csrf = await admin_csrf(served)
    headers = {**bearer(ADMIN), "Origin": served.origin}
    async with aiohttp.ClientSession() as http:
        for entry, left in ((first, [second]), (first, [second]), ("all", [])):
            async with http.post(
                f"{served.url}/replay",
                data={"entry": entry, "csrf": csrf},
                headers=headers,
                allow_redirects=False,
            ) as resp:
                assert resp.status == 303
            assert served.dead() == left
    assert served.outbox_len() == 2  # the second replay of `first` found it gone
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{served.url}?replayed=1&missed=0", headers=bearer(ADMIN)) as resp:
            assert "Replayed 1 dead letter(s)" in await resp.text()
        async with http.post(
            f"{served.url}/replay",
            data={"entry": "not-an-id", "csrf": csrf},
            headers=headers,
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303 and "missed=1" in resp.headers["Location"]


async def test_an_unreachable_redis_is_a_503_not_a_traceback() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", ops={"token": VIEW})
    deps = Deps.build(settings, client=redis.Redis.from_url(settings.redis_url))
    app = web.Application()
    app.add_routes(ops_routes(settings, deps))
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_loopback()
    await web.SockSite(runner, sock).start()
    try:
        url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/ops"
        status, body, _ = await get(url, headers=bearer(VIEW))
        assert status == 503 and "Redis cannot be reached" in body
    finally:
        await runner.cleanup()
        deps.close()


async def test_tokens_never_reach_the_log(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    entry = put_dead_letter(served.deps)
    csrf = await admin_csrf(served)
    async with aiohttp.ClientSession() as http:
        for token in (VIEW, ADMIN, "guess-0123456789abcdef"):
            async with http.post(
                f"{served.url}/login", data={"token": token}, headers={"Origin": served.origin}
            ):
                pass
        async with http.post(
            f"{served.url}/replay",
            data={"entry": entry, "csrf": csrf},
            headers={**bearer(ADMIN), "Origin": served.origin},
        ):
            pass
    assert "signed in" in caplog.text and "replayed 1 dead letter(s)" in caplog.text
    for secret in (VIEW, ADMIN, "guess-0123456789abcdef", csrf):
        assert secret not in caplog.text
