"""The pure guards in front of ingress: request checks, bounded JSON, throttled logs, back-off."""

from __future__ import annotations

import hashlib
import hmac
import logging

import pytest

from adapters.slack import http
from bot.logs import ThrottledLog
from bot.supervise.backoff import Backoff
from bot.text import jsonsafe

SECRET = "signing-secret"
NOW = 1_700_000_000


def signed(body: bytes, ts: int = NOW, secret: str = SECRET) -> dict[str, str]:
    base = f"v0:{ts}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


GOOD = b'{"type": "event_callback", "event": {"type": "message"}, "authorizations": [{}]}'


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        (signed(GOOD), GOOD, None),
        (signed(GOOD, ts=NOW - 299), GOOD, None),
        (signed(GOOD, ts=NOW - 301), GOOD, 401),
        (signed(GOOD, ts=NOW + 301), GOOD, 401),
        (signed(GOOD, secret="other"), GOOD, 401),
        (signed(GOOD) | {"X-Slack-Request-Timestamp": "abc"}, GOOD, 401),
        (signed(GOOD) | {"X-Slack-Request-Timestamp": ""}, GOOD, 401),
        (signed(GOOD) | {"X-Slack-Request-Timestamp": "9" * 40}, GOOD, 401),
        (signed(GOOD) | {"X-Slack-Signature": ""}, GOOD, 401),
        (signed(GOOD) | {"X-Slack-Signature": "v0=é"}, GOOD, 401),
        ({}, GOOD, 401),
        (signed(GOOD), GOOD + b" ", 401),  # the body is what is signed
        (signed(b"\xff{}"), b"\xff{}", 400),
        (signed(b"[1]"), b"[1]", 400),
        (signed(b"{}"), b"{}", 400),
        (signed(b"{"), b"{", 400),
        (signed(b'{"event": "x"}'), b'{"event": "x"}', 400),
        (signed(b'{"event": {"type": 1}}'), b'{"event": {"type": 1}}', 400),
        (signed(b'{"authorizations": [1]}'), b'{"authorizations": [1]}', 400),
        (signed(b'{"team_id": 5}'), b'{"team_id": 5}', 400),
        (signed(b"[" * 70 + b"]" * 70), b"[" * 70 + b"]" * 70, 400),
    ],
)
def test_slack_request_check(headers: dict[str, str], body: bytes, status: int | None) -> None:
    rejected = http.check(secret=SECRET, body=body, headers=headers, now=NOW)
    assert (rejected.status if rejected else None) == status


FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    ("body", "ctype", "parsed"),
    [
        (b"command=%2Fsubagents&text=list", FORM, {"command": "/subagents", "text": "list"}),
        (b"payload=%7B%22type%22%3A%22x%22%7D", FORM, {"type": "x"}),
        (b'{"type": "x"}', FORM, {"type": "x"}),  # bolt reads a "{" body as JSON whatever
        (b'{"type": "x"}', "application/json; charset=utf-8", {"type": "x"}),
    ],
)
def test_slack_bodies_parse_as_bolt_parses_them(body: bytes, ctype: str, parsed: object) -> None:
    assert http.parse(body, ctype) == parsed


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        b"{",
        "[" * 100_000 + "]" * 100_000,
        "[" * 65 + "]" * 65,
        '{"a": ' * 65 + "1" + "}" * 65,
    ],
)
def test_bounded_json_refuses_with_value_error(raw: bytes | str) -> None:
    with pytest.raises(ValueError):
        jsonsafe.loads(raw)


def test_bounded_json_accepts_platform_depths() -> None:
    nested = "[" * 64 + "]" * 64
    assert jsonsafe.depth(jsonsafe.loads(nested)) == 64
    assert jsonsafe.loads(b'{"a": [1, {"b": "\\ud800"}]}') == {"a": [1, {"b": "\ud800"}]}
    assert jsonsafe.depth(5) == 0


def test_throttled_log_writes_once_per_interval_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("t"), interval=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        written = [throttled.warning("k", "down %d", i) for i in range(5)]
        assert throttled.warning("other", "another kind")
        now[0] = 61.0
        assert throttled.warning("k", "still down")
    assert written == [True, False, False, False, False]
    assert [r.getMessage() for r in caplog.records] == [
        "down 0",
        "another kind",
        "still down (4 more like it in the last 60s)",
    ]
    assert caplog.records[0].filename == "test_ingress_guards.py"  # the caller's line


def test_backoff_doubles_to_its_cap_with_jitter_and_resets() -> None:
    backoff = Backoff(base=0.5, cap=4.0, jitter=0.25)
    delays = [backoff.next() for _ in range(6)]
    for delay, nominal in zip(delays, [0.5, 1, 2, 4, 4, 4], strict=True):
        assert nominal * 0.75 <= delay <= nominal
    backoff.reset()
    assert backoff.next() <= 0.5
