"""Checks on an HTTP request to the Slack endpoint, before bolt or anything else reads it.

Pure (the clock is an argument), so each rule is table-tested. Order matters: the ``v0``
signature is checked over the raw bytes first, so an unauthenticated sender learns nothing
and costs one HMAC; only a body Slack signed is decoded and parsed, and only a body of the
shape bolt's middleware assumes is handed to bolt (it calls ``.get`` on ``event`` and on
each ``authorizations`` entry, and would answer anything else with a 500 and a traceback).
An interactivity body must also hold what bolt's ``to_action`` / ``to_step`` / ``to_view``
read with ``[]`` (:func:`interactivity_problem`): bolt builds every listener argument from
them, its error handler's too, so a ``KeyError`` there is a 500 that no handler of ours sees.
:func:`reader_problem` then runs bolt's own readers over the body, so a field a later bolt
version reads fails here, as a 400, not in bolt.

Slack retries a delivery that got no 2xx at most three times (at once, after a minute,
after five), so a signed body that is malformed gets a plain 400: retrying is bounded and
nothing is lost that could have been handled.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from slack_bolt.request import payload_utils as bolt_payload

from bot.text import jsonsafe

SIGNATURE_WINDOW_SECONDS = 300
"""Slack's own replay window for ``X-Slack-Request-Timestamp``."""
_MAX_TIMESTAMP_DIGITS = 12
_FORM = "application/x-www-form-urlencoded"
_STRING_FIELDS = (
    *("type", "team_id", "api_app_id", "event_id", "challenge", "token"),
    *("command", "channel_id", "user_id", "text", "trigger_id", "callback_id", "action_id"),
)
_CALLBACK_TYPES = frozenset(
    {"interactive_message", "dialog_submission", "dialog_cancellation", "dialog_suggestion"}
    | {"workflow_step_edit", "shortcut", "message_action"}
)
"""Interactivity types bolt matches by their string ``callback_id``."""
_VIEW_TYPES = frozenset({"view_submission", "view_closed"})
_READERS = (
    bolt_payload.to_action, bolt_payload.to_step, bolt_payload.to_view,
    bolt_payload.to_options, bolt_payload.to_shortcut, bolt_payload.to_event,
    bolt_payload.to_message, bolt_payload.to_command,
)  # fmt: skip
"""The readers bolt calls to build every listener's (and error handler's) arguments."""


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """Why a request is refused: the HTTP status to answer and a short reason."""

    status: int
    reason: str


def check(*, secret: str, body: bytes, headers: Mapping[str, str], now: float) -> Rejection | None:
    """``None`` if Slack signed ``body`` and bolt can take it; else why not."""
    problem = signature_problem(
        secret=secret,
        body=body,
        timestamp=headers.get("X-Slack-Request-Timestamp", ""),
        signature=headers.get("X-Slack-Signature", ""),
        now=now,
    )
    if problem:
        return Rejection(status=401, reason=problem)
    problem = body_problem(body, headers.get("Content-Type", ""))
    return Rejection(status=400, reason=problem) if problem else None


def signature_problem(
    *, secret: str, body: bytes, timestamp: str, signature: str, now: float
) -> str | None:
    """What is wrong with the ``v0`` signature of ``body``, or ``None`` if it is Slack's."""
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > _MAX_TIMESTAMP_DIGITS:
        return "missing or malformed X-Slack-Request-Timestamp"
    if abs(now - int(timestamp)) > SIGNATURE_WINDOW_SECONDS:
        return "X-Slack-Request-Timestamp outside the 5-minute window"
    if not signature:
        return "missing X-Slack-Signature"
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = b"v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest().encode()
    given = signature.encode("utf-8", "replace")
    return None if hmac.compare_digest(expected, given) else "signature mismatch"


def body_problem(body: bytes, content_type: str) -> str | None:
    """What makes a signed body unusable, or ``None`` (parsed the way bolt parses it)."""
    try:
        parsed = parse(body, content_type)
    except ValueError as exc:
        return f"malformed body: {exc}"
    if not isinstance(parsed, dict) or not parsed:
        return "malformed body: not a JSON object or form"
    return shape_problem(parsed)


def parse(body: bytes, content_type: str) -> Any:
    """The payload bolt will see: JSON, or form fields, or a form's ``payload`` JSON.

    Raises:
        ValueError: Not UTF-8, unparseable, or nested too deeply.
    """
    text = body.decode("utf-8")  # UnicodeDecodeError is a ValueError
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime != _FORM or text.startswith("{"):
        return jsonsafe.loads(text)
    fields = dict(parse_qsl(text, keep_blank_values=True))
    if "payload" in fields:
        return jsonsafe.loads(fields["payload"])
    return fields


def shape_problem(body: Mapping[str, Any]) -> str | None:
    """A field bolt reads that has the wrong JSON type, or ``None``."""
    for name in _STRING_FIELDS:
        if name in body and not isinstance(body[name], str):
            return f"{name!r} is not a string"
    event = body.get("event")
    if "event" in body and not isinstance(event, dict):
        return "'event' is not an object"
    if isinstance(event, dict) and not isinstance(event.get("type", ""), str):
        return "'event.type' is not a string"
    auths = body.get("authorizations")
    if auths is not None and not (
        isinstance(auths, list) and all(isinstance(a, dict) for a in auths)
    ):
        return "'authorizations' is not a list of objects"
    return interactivity_problem(body) or reader_problem(body)


def interactivity_problem(body: Mapping[str, Any]) -> str | None:
    """What an interactivity body lacks of what Slack always sends and bolt reads, or ``None``.

    Slack documents these fields as present in every such payload; bolt reads them with
    ``[]`` once the ``type`` says what the body is.
    """
    kind = body.get("type")
    if kind in _CALLBACK_TYPES and not isinstance(body.get("callback_id"), str):
        return f"{kind} without a string 'callback_id'"
    if kind in ("block_actions", "interactive_message"):
        actions = body.get("actions")
        if not isinstance(actions, list) or not actions:
            return f"{kind} without 'actions'"
        if not all(isinstance(a, dict) for a in actions):
            return f"{kind} 'actions' are not objects"
        if kind == "block_actions" and not isinstance(actions[0].get("action_id"), str):
            return "block_actions action without a string 'action_id'"
    if kind == "workflow_step_edit" and not isinstance(body.get("workflow_step"), dict):
        return "workflow_step_edit without 'workflow_step'"
    if kind == "block_suggestion" and not isinstance(body.get("action_id"), str):
        return "block_suggestion without a string 'action_id'"
    if kind in _VIEW_TYPES:
        view = body.get("view")
        if not isinstance(view, dict):
            return f"{kind} without a 'view' object"
        if not isinstance(view.get("type"), str) or not isinstance(view.get("callback_id"), str):
            return f"{kind} 'view' without a string 'type' and 'callback_id'"
        if view["type"] == "workflow_step" and not isinstance(body.get("workflow_step"), dict):
            return f"{kind} of a workflow step without 'workflow_step'"
    return None


def reader_problem(body: Mapping[str, Any]) -> str | None:
    """What bolt's own argument readers fail on in ``body``, or ``None``.

    The safety net behind :func:`interactivity_problem`: the readers of the bolt version
    installed, run here where a failure is a 400 and one line, not a 500 in bolt.
    """
    payload = dict(body)
    for read in _READERS:
        try:
            read(payload)
        except (LookupError, TypeError, AttributeError, ValueError) as exc:
            return f"bolt's {read.__name__} cannot read it ({type(exc).__name__}: {exc})"[:200]
    return None
