"""Slack wire formats for tests: event payloads, Socket Mode envelopes, request signing.

Pure builders used by :mod:`bot.testing.fake_slack`; usable on their own to craft the
bodies Slack would send (``event_callback``, slash commands) and their ``v0`` signatures.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import time
import uuid
from typing import Any

DEFAULT_USER = "U0HUMAN01"
DEFAULT_CHANNEL = "C0GENERAL"

_counter = itertools.count(1)


def new_ts() -> str:
    """A fresh, increasing Slack message timestamp (``"<seconds>.<micro>"``)."""
    n = next(_counter)
    return f"{int(time.time()) + n // 1_000_000}.{n % 1_000_000:06d}"


def sign(body: str | bytes, *, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """The ``X-Slack-Request-Timestamp`` / ``X-Slack-Signature`` (v0) headers for ``body``.

    Slack signs the raw bytes; a ``str`` body is taken as its UTF-8 encoding.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    raw = body.encode() if isinstance(body, str) else body
    base = f"v0:{ts}:".encode() + raw
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


def message_event(
    *,
    text: str,
    user: str | None = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str | None = None,
    subtype: str | None = None,
    bot_id: str | None = None,
    team: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event as the Events API sends it (``channel_type`` from the id)."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "text": text,
        "ts": ts or new_ts(),
        "channel_type": channel_type or _channel_type(channel),
    }
    optional = {"user": user, "thread_ts": thread_ts, "subtype": subtype, "bot_id": bot_id}
    event.update({k: v for k, v in optional.items() if v is not None})
    if team:
        event["team"] = team
    event["event_ts"] = event["ts"]
    event.update(extra)
    return event


def app_mention_event(*, text: str, **fields: Any) -> dict[str, Any]:
    """An ``app_mention`` event: :func:`message_event`'s ``fields`` without ``channel_type``
    (Slack sends none with a mention)."""
    event = message_event(text=text, **fields)
    del event["channel_type"]
    event["type"] = "app_mention"
    return event


def event_callback(
    event: dict[str, Any], *, team_id: str, app_id: str, event_id: str | None = None
) -> dict[str, Any]:
    """Wrap ``event`` in the outer ``event_callback`` body."""
    return {
        "token": "legacy-verification-token",
        "team_id": team_id,
        "api_app_id": app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": team_id, "is_bot": True, "is_enterprise_install": False}],
        "is_ext_shared_channel": False,
    }


def slash_command(
    *,
    text: str,
    team_id: str,
    app_id: str,
    command: str = "/subagents",
    user_id: str = DEFAULT_USER,
    channel_id: str = DEFAULT_CHANNEL,
    channel_name: str | None = None,
) -> dict[str, str]:
    """The form fields of a slash command invocation."""
    trigger = f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:16]}"
    return {
        "token": "legacy-verification-token",
        "team_id": team_id,
        "team_domain": "fake",
        "channel_id": channel_id,
        "channel_name": channel_name
        or ("directmessage" if channel_id.startswith("D") else "general"),
        "user_id": user_id,
        "user_name": "human",
        "command": command,
        "text": text,
        "api_app_id": app_id,
        "is_enterprise_install": "false",
        "response_url": "https://hooks.invalid/commands/fake",
        "trigger_id": trigger,
    }


def block_actions(
    *,
    message: dict[str, Any],
    channel: str,
    action: dict[str, Any],
    team_id: str,
    app_id: str,
    user: str = DEFAULT_USER,
) -> dict[str, Any]:
    """The ``block_actions`` payload of a button pressed under ``message`` (a message object
    as the Web API returns it, with its ``blocks``): ``action`` is the button element."""
    now = time.time()
    trigger = f"{int(now)}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:16]}"
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "human", "name": "human", "team_id": team_id},
        "api_app_id": app_id,
        "token": "legacy-verification-token",
        "container": {
            "type": "message", "message_ts": message["ts"], "channel_id": channel,
            "is_ephemeral": False, **({"thread_ts": message["thread_ts"]}
                                      if message.get("thread_ts") else {}),
        },
        "trigger_id": trigger,
        "team": {"id": team_id, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "state": {"values": {}},
        "response_url": "https://hooks.invalid/actions/fake",
        "actions": [{
            "action_id": action["action_id"], "block_id": action.get("block_id", ""),
            "text": action["text"], "value": action.get("value", ""),
            **({"style": action["style"]} if action.get("style") else {}),
            "type": "button", "action_ts": f"{now:.6f}",
        }],
    }  # fmt: skip


def envelope(
    kind: str,
    payload: dict[str, Any],
    *,
    retry_attempt: int | None = None,
    retry_reason: str = "",
    envelope_id: str | None = None,
) -> dict[str, Any]:
    """A Socket Mode envelope (``events_api``, ``slash_commands``, ``interactive``)."""
    env: dict[str, Any] = {
        "envelope_id": envelope_id or str(uuid.uuid4()),
        "payload": payload,
        "type": kind,
        "accepts_response_payload": kind != "events_api",
    }
    if kind == "events_api":
        env["retry_attempt"] = retry_attempt or 0
        env["retry_reason"] = retry_reason
    return env


def _channel_type(channel: str) -> str:
    return {"D": "im", "G": "group"}.get(channel[:1], "channel")
