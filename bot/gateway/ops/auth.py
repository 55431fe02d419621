"""Who may see the ops page and who may replay: pure decisions, no I/O.

Two tokens: ``FANBOT_OPS__TOKEN`` opens the read-only page, ``FANBOT_OPS__ADMIN_TOKEN``
also allows the one write action (replaying dead letters). A token arrives as
``Authorization: Bearer …`` or once through the login form, which sets a session cookie
(HttpOnly, SameSite=Strict): ``<role>.<expires>.<nonce>.<hmac>``, signed with a key derived
from the role's token, so rotating a token signs everyone out and no server-side session
store is needed. Every comparison of a secret is constant-time.

A write must pass, in this order: a session (else 401), the admin role (403), an
``Origin`` header naming this page's origin (403), and the session's CSRF token (403).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

COOKIE = "fanbot_ops"
SESSION_SECONDS = 12 * 3600
BEARER_NONCE = "bearer"
"""The nonce of a Bearer-authenticated request (its CSRF token derives from it)."""


class Role(enum.StrEnum):
    VIEWER = "viewer"
    ADMIN = "admin"


@dataclass(frozen=True, kw_only=True)
class Session:
    """A signed-in viewer or admin.

    Attributes:
        role: What it may do.
        nonce: Random per login; the CSRF token derives from it.
        expires: Unix time the cookie stops working.
    """

    role: Role
    nonce: str
    expires: int


@dataclass(frozen=True, kw_only=True)
class Denial:
    """Why a request is refused, as the HTTP status and one line for the operator."""

    status: int
    reason: str


@dataclass(frozen=True)
class Tokens:
    """The configured secrets (the admin one optional)."""

    viewer: str
    admin: str | None = None

    def __repr__(self) -> str:
        return "Tokens(***)"

    def role_of(self, presented: str) -> Role | None:
        """The role ``presented`` grants; both tokens are always compared (constant time)."""
        given = presented.encode()
        is_viewer = hmac.compare_digest(given, self.viewer.encode())
        is_admin = self.admin is not None and hmac.compare_digest(given, self.admin.encode())
        if is_admin:
            return Role.ADMIN
        return Role.VIEWER if is_viewer else None

    def _key(self, role: Role, purpose: str) -> bytes:
        secret = self.admin if role is Role.ADMIN else self.viewer
        assert secret is not None, "an admin session needs the admin token"
        return hashlib.sha256(f"fanbot-ops:{purpose}:{secret}".encode()).digest()

    def _sign(self, role: Role, payload: str, purpose: str = "session") -> str:
        return hmac.new(self._key(role, purpose), payload.encode(), hashlib.sha256).hexdigest()


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def issue(tokens: Tokens, role: Role, *, now: float, nonce: str | None = None) -> str:
    """A session cookie value for ``role``, valid :data:`SESSION_SECONDS`."""
    nonce = nonce or secrets.token_urlsafe(18)
    payload = f"{role.value}.{int(now) + SESSION_SECONDS}.{nonce}"
    return f"{payload}.{tokens._sign(role, payload)}"


def verify(tokens: Tokens, value: str | None, *, now: float) -> Session | None:
    """The session a cookie value proves, or None (forged, expired, or its token unset)."""
    parts = (value or "").split(".")
    if len(parts) != 4:
        return None
    role_text, expires_text, nonce, signature = parts
    try:
        role, expires = Role(role_text), int(expires_text)
    except ValueError:
        return None
    if role is Role.ADMIN and tokens.admin is None:
        return None
    expected = tokens._sign(role, f"{role_text}.{expires_text}.{nonce}")
    if not hmac.compare_digest(signature.encode(), expected.encode()) or expires <= now:
        return None
    return Session(role=role, nonce=nonce, expires=expires)


def authenticate(
    tokens: Tokens, *, authorization: str | None, cookie: str | None, now: float
) -> Session | None:
    """The requester's session: a Bearer token wins over the cookie."""
    presented = bearer(authorization)
    if presented is not None:
        role = tokens.role_of(presented)
        return Session(role=role, nonce=BEARER_NONCE, expires=0) if role else None
    return verify(tokens, cookie, now=now)


def csrf_token(tokens: Tokens, session: Session) -> str:
    """The CSRF token the page embeds in its forms ("" for a viewer: no form to post)."""
    if session.role is not Role.ADMIN:
        return ""
    return tokens._sign(Role.ADMIN, session.nonce, purpose="csrf")


def origin_ok(origin: str | None, *, host: str, expected: str | None) -> bool:
    """Whether ``Origin`` names this page: ``expected`` (scheme://host[:port]) when
    configured, else any scheme on the request's own ``Host``."""
    if not origin or origin == "null":
        return False
    if expected is not None:
        return origin.rstrip("/").lower() == expected.rstrip("/").lower()
    return urlsplit(origin).netloc.lower() == host.lower()


def check_write(
    tokens: Tokens,
    session: Session | None,
    *,
    csrf: str | None,
    origin: str | None,
    host: str,
    expected_origin: str | None,
) -> Denial | None:
    """None when the write may go ahead, else why not (see the module docstring)."""
    if session is None:
        return Denial(status=401, reason="not signed in")
    if session.role is not Role.ADMIN:
        return Denial(status=403, reason="replaying needs the admin token")
    if not origin:
        return Denial(status=403, reason="refused: the request has no Origin header")
    if not origin_ok(origin, host=host, expected=expected_origin):
        return Denial(status=403, reason="refused: the request comes from another origin")
    expected = csrf_token(tokens, session)
    if not csrf or not hmac.compare_digest(csrf.encode(), expected.encode()):
        return Denial(status=403, reason="refused: missing or wrong CSRF token (reload the page)")
    return None
