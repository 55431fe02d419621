"""The ops page's HTTP shell: aiohttp handlers around :mod:`~bot.gateway.ops.auth`,
:mod:`~bot.gateway.ops.snapshot` and the templates.

Routes (all under the gateway's HTTP port): ``GET /ops`` (the page, or the sign-in form
with 401), ``POST /ops/login``, ``POST /ops/logout`` and ``POST /ops/replay`` (admin,
Origin and CSRF checked). Store reads and the replay run in a thread: the sync Redis client
must not block the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping

from aiohttp import web
from redis.exceptions import RedisError

from bot.config import OpsSettings
from bot.deps import Deps
from bot.gateway.ops import auth
from bot.gateway.ops.snapshot import replay, take
from bot.gateway.ops.templates import render_error, render_login, render_page
from bot.gateway.ops.view import build_page
from bot.store.dead_letters import ENTRY_ID
from bot.text.units import utc_stamp

log = logging.getLogger(__name__)

PATH = "/ops"
MAX_FORM_BYTES = 4096


class OpsPage:
    """The handlers, bound to the settings and the stores.

    Args:
        settings: The ``ops`` section (its ``token`` must be set).
        deps: The gateway's stores (sync; used from a thread).
    """

    def __init__(self, *, settings: OpsSettings, deps: Deps) -> None:
        assert settings.token is not None, "the ops page is off without a token"
        admin = settings.admin_token
        self.tokens = auth.Tokens(
            settings.token.get_secret_value(), admin.get_secret_value() if admin else None
        )
        self.settings = settings
        self.deps = deps

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PATH, self.page, allow_head=False),
            web.post(f"{PATH}/login", self.login),
            web.post(f"{PATH}/logout", self.logout),
            web.post(f"{PATH}/replay", self.replay),
        ]

    def _session(self, request: web.Request) -> auth.Session | None:
        return auth.authenticate(
            self.tokens,
            authorization=request.headers.get("Authorization"),
            cookie=request.cookies.get(auth.COOKIE),
            now=time.time(),
        )

    async def page(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if session is None:
            refused = "Authorization" in request.headers
            return _login(error="Wrong token." if refused else "", action="ops/login")
        refresh = 0 if request.query.get("refresh") == "0" else self.settings.refresh_seconds
        nonce = secrets.token_urlsafe(12)
        try:
            body = await asyncio.to_thread(
                self._render,
                session,
                refresh=refresh,
                flash=_flash(request.query),
                nonce=nonce,
            )
        except (RedisError, OSError) as exc:
            log.warning("ops page: cannot read Redis: %s", exc)
            return _denied(auth.Denial(status=503, reason="Redis cannot be reached; retry soon"))
        return _html(body, nonce=nonce)

    def _render(self, session: auth.Session, *, refresh: int, flash: str, nonce: str) -> str:
        """Read and render the page (in a thread: the reads block, the render takes a while)."""
        snapshot = take(self.deps, recent_seconds=self.settings.recent_minutes * 60)
        return render_page(
            build_page(snapshot, settings=self.deps.settings),
            role=session.role.value,
            csrf=auth.csrf_token(self.tokens, session),
            generated=utc_stamp(snapshot.now, zone=False),
            refresh=refresh,
            flash=flash,
            nonce=nonce,
        )

    async def login(self, request: web.Request) -> web.Response:
        if not self._same_origin(request):
            return _denied(auth.Denial(status=403, reason="refused: cross-origin sign-in"))
        form = await _form(request)
        role = self.tokens.role_of(form.get("token", ""))
        if role is None:
            log.warning("ops page: refused sign-in from %s (wrong token)", request.remote)
            return _login(error="Wrong token.", action="login")
        response = web.HTTPSeeOther("../ops")  # relative: /ops/login -> /ops
        response.set_cookie(
            auth.COOKIE,
            auth.issue(self.tokens, role, now=time.time()),
            path=PATH,  # sent to the page only, never to the webhooks on the same port
            max_age=auth.SESSION_SECONDS,
            httponly=True,
            samesite="Strict",
            secure=_secure(request),
        )
        log.info("ops page: %s signed in from %s", role.value, request.remote)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        if not self._same_origin(request):
            return _denied(auth.Denial(status=403, reason="refused: cross-origin sign-out"))
        response = web.HTTPSeeOther("../ops")
        response.del_cookie(auth.COOKIE, path=PATH)
        raise response

    async def replay(self, request: web.Request) -> web.Response:
        session = self._session(request)
        form = await _form(request)
        denial = auth.check_write(
            self.tokens,
            session,
            csrf=form.get("csrf"),
            origin=request.headers.get("Origin"),
            host=request.host,
            expected_origin=self.settings.origin,
        )
        if denial is not None:
            log.warning("ops page: replay refused from %s: %s", request.remote, denial.reason)
            return _denied(denial)
        entry = form.get("entry", "")
        try:
            replayed, missed = await asyncio.to_thread(
                replay, self.deps, None if entry == "all" else entry
            )
        except (RedisError, OSError) as exc:
            log.warning("ops page: cannot replay: %s", exc)
            return _denied(auth.Denial(status=503, reason="Redis cannot be reached; retry soon"))
        shown = entry if entry == "all" or ENTRY_ID.fullmatch(entry) else "an invalid entry id"
        log.info("ops page: replayed %d dead letter(s) (%s)", replayed, shown)
        raise web.HTTPSeeOther(f"../ops?replayed={replayed}&missed={missed}")

    def _same_origin(self, request: web.Request) -> bool:
        return auth.origin_ok(
            request.headers.get("Origin"), host=request.host, expected=self.settings.origin
        )


async def _form(request: web.Request) -> dict[str, str]:
    if request.content_length is not None and request.content_length > MAX_FORM_BYTES:
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_FORM_BYTES, actual_size=request.content_length
        )
    data = await request.post()
    return {k: v for k, v in data.items() if isinstance(v, str)}


def _flash(query: Mapping[str, str]) -> str:
    replayed, missed = query.get("replayed", ""), query.get("missed", "")
    if not replayed.isdigit():
        return ""
    text = f"Replayed {int(replayed)} dead letter(s) into the outbox."
    if missed.isdigit() and int(missed):
        text += f" {int(missed)} could not be (already replayed, or no message body)."
    return text


def _secure(request: web.Request) -> bool:
    return request.secure or request.headers.get("X-Forwarded-Proto", "") == "https"


def _headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'nonce-{nonce}'; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        # same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on
        # the page's own form posts, which the Origin check must refuse.
        "Referrer-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


def _html(body: str, *, nonce: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", headers=_headers(nonce))


def _login(*, error: str, action: str) -> web.Response:
    """The sign-in form with 401; ``action`` is the login URL relative to this one."""
    nonce = secrets.token_urlsafe(12)
    body = render_login(error=error, action=action, nonce=nonce)
    response = _html(body, nonce=nonce, status=401)
    response.headers["WWW-Authenticate"] = 'Bearer realm="fanbot ops"'
    return response


def _denied(denial: auth.Denial) -> web.Response:
    nonce = secrets.token_urlsafe(12)
    body = render_error(status=denial.status, reason=denial.reason, back="../ops", nonce=nonce)
    return _html(body, nonce=nonce, status=denial.status)
