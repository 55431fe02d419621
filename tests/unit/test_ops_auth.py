"""The ops page's access decisions: tokens, session cookies, CSRF and Origin (pure)."""

from __future__ import annotations

import pytest

from bot.gateway.ops import auth
from bot.gateway.ops.auth import Role, Session, Tokens

VIEW = "v" * 24
ADMIN = "a" * 24
TOKENS = Tokens(VIEW, ADMIN)
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("presented", "role"),
    [(VIEW, Role.VIEWER), (ADMIN, Role.ADMIN), ("", None), (VIEW[:-1], None), (VIEW + "x", None)],
)
def test_a_token_grants_its_role(presented: str, role: Role | None) -> None:
    assert TOKENS.role_of(presented) is role


def test_without_an_admin_token_nobody_is_admin() -> None:
    assert Tokens(VIEW).role_of(ADMIN) is None
    assert Tokens(VIEW).role_of("") is None


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (f"Bearer {VIEW}", VIEW),
        (f"bearer  {VIEW} ", VIEW),
        ("Bearer", None),
        ("Bearer ", None),
        (f"Basic {VIEW}", None),
        (None, None),
        ("", None),
    ],
)
def test_bearer_header(header: str | None, token: str | None) -> None:
    assert auth.bearer(header) == token


def test_an_issued_cookie_verifies_until_it_expires() -> None:
    value = auth.issue(TOKENS, Role.ADMIN, now=NOW, nonce="n0nce")
    session = auth.verify(TOKENS, value, now=NOW + 60)
    assert session == Session(role=Role.ADMIN, nonce="n0nce", expires=int(NOW) + 12 * 3600)
    assert auth.verify(TOKENS, value, now=NOW + auth.SESSION_SECONDS) is None


def forged(value: str, part: int, text: str) -> str:
    parts = value.split(".")
    parts[part] = text
    return ".".join(parts)


VALID_VIEWER = auth.issue(TOKENS, Role.VIEWER, now=NOW, nonce="abc")


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        forged(VALID_VIEWER, 0, "admin"),  # promote oneself: the signature no longer fits
        forged(VALID_VIEWER, 1, str(int(NOW) + 10**6)),  # extend the expiry
        forged(VALID_VIEWER, 2, "other"),  # another nonce (another CSRF token)
        forged(VALID_VIEWER, 3, "0" * 64),
        forged(VALID_VIEWER, 0, "root"),
        forged(VALID_VIEWER, 1, "soon"),
        VALID_VIEWER + ".x",
    ],
)
def test_a_tampered_cookie_is_refused(value: str | None) -> None:
    assert auth.verify(TOKENS, value, now=NOW) is None


def test_rotating_a_token_signs_its_sessions_out() -> None:
    value = auth.issue(TOKENS, Role.VIEWER, now=NOW)
    assert auth.verify(Tokens("w" * 24, ADMIN), value, now=NOW) is None
    admin = auth.issue(TOKENS, Role.ADMIN, now=NOW)
    assert auth.verify(Tokens(VIEW), admin, now=NOW) is None  # admin token unset since


def test_bearer_wins_over_the_cookie() -> None:
    cookie = auth.issue(TOKENS, Role.ADMIN, now=NOW)
    viewer = auth.authenticate(TOKENS, authorization=f"Bearer {VIEW}", cookie=cookie, now=NOW)
    assert viewer is not None and viewer.role is Role.VIEWER
    wrong = auth.authenticate(TOKENS, authorization="Bearer nope", cookie=cookie, now=NOW)
    assert wrong is None


@pytest.mark.parametrize(
    ("origin", "host", "expected", "ok"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", None, True),
        ("https://ops.example.com", "ops.example.com", None, True),
        ("https://OPS.example.com", "ops.example.com", None, True),
        ("https://evil.example", "ops.example.com", None, False),
        ("http://127.0.0.1:9999", "127.0.0.1:8080", None, False),
        ("null", "127.0.0.1:8080", None, False),
        ("", "127.0.0.1:8080", None, False),
        (None, "127.0.0.1:8080", None, False),
        ("https://ops.example.com", "fanbot:8080", "https://ops.example.com", True),
        ("http://ops.example.com", "fanbot:8080", "https://ops.example.com", False),
        ("http://fanbot:8080", "fanbot:8080", "https://ops.example.com", False),
    ],
)
def test_origin(origin: str | None, host: str, expected: str | None, ok: bool) -> None:
    assert auth.origin_ok(origin, host=host, expected=expected) is ok


ADMIN_SESSION = Session(role=Role.ADMIN, nonce="n1", expires=int(NOW) + 60)
VIEWER_SESSION = Session(role=Role.VIEWER, nonce="n2", expires=int(NOW) + 60)
GOOD_CSRF = auth.csrf_token(TOKENS, ADMIN_SESSION)
SITE = "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("session", "csrf", "origin", "status", "reason"),
    [
        (None, GOOD_CSRF, SITE, 401, "not signed in"),
        (VIEWER_SESSION, GOOD_CSRF, SITE, 403, "admin token"),
        (ADMIN_SESSION, GOOD_CSRF, None, 403, "no Origin"),
        (ADMIN_SESSION, GOOD_CSRF, "https://evil.example", 403, "another origin"),
        (ADMIN_SESSION, None, SITE, 403, "CSRF"),
        (ADMIN_SESSION, "", SITE, 403, "CSRF"),
        (ADMIN_SESSION, GOOD_CSRF[:-1] + ("1" if GOOD_CSRF[-1] == "0" else "0"), SITE, 403, "CSRF"),
        (  # another admin session's token
            ADMIN_SESSION,
            auth.csrf_token(TOKENS, Session(role=Role.ADMIN, nonce="n9", expires=0)),
            SITE,
            403,
            "CSRF",
        ),
    ],
)
def test_a_write_is_refused(
    session: Session | None, csrf: str | None, origin: str | None, status: int, reason: str
) -> None:
    denial = auth.check_write(
        TOKENS, session, csrf=csrf, origin=origin, host="127.0.0.1:8080", expected_origin=None
    )
    assert denial is not None
    assert denial.status == status and reason in denial.reason


def test_a_write_with_everything_right_goes_ahead() -> None:
    denial = auth.check_write(
        TOKENS,
        ADMIN_SESSION,
        csrf=GOOD_CSRF,
        origin=SITE,
        host="127.0.0.1:8080",
        expected_origin=None,
    )
    assert denial is None


def test_a_viewer_gets_no_csrf_token_and_tokens_never_show_in_repr() -> None:
    assert auth.csrf_token(TOKENS, VIEWER_SESSION) == ""
    assert VIEW not in repr(TOKENS) and ADMIN not in repr(TOKENS)
    assert VIEW not in auth.issue(TOKENS, Role.VIEWER, now=NOW)
