"""Slack's notices about the app itself, and names for payloads fanbot does not act on (pure).

Slack sends these to the same endpoint as messages, and a non-2xx answer counts as a failed
delivery (enough of them and Slack disables the app's events), so every one is answered
200 and logged (docs/guides/slack.md "Events fanbot does not act on"):

- ``app_rate_limited`` (Events API only, no inner event): the app went over its event rate
  for a workspace; :func:`rate_limited` names the minute for the warning.
- ``app_uninstalled``, and ``tokens_revoked`` naming bot tokens: the workspace's bot token
  is gone; :func:`lost_workspace` says which workspace, and the adapter stops sending there.
  ``tokens_revoked`` for user (``oauth``) tokens only changes nothing: fanbot uses none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOST_EVENTS = frozenset({"app_uninstalled", "tokens_revoked"})


@dataclass(frozen=True, kw_only=True)
class Lost:
    """A workspace whose bot token Slack says is gone, and the event that said it."""

    team_id: str
    event: str


def rate_limited(body: Mapping[str, Any]) -> str | None:
    """The minute an ``app_rate_limited`` body names, as UTC text; ``None`` for any other body."""
    if body.get("type") != "app_rate_limited":
        return None
    minute = body.get("minute_rate_limited")
    if isinstance(minute, bool) or not isinstance(minute, int | float):
        return f"minute_rate_limited={minute!r}"
    try:
        when = dt.datetime.fromtimestamp(minute, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return f"minute_rate_limited={minute!r}"
    return f"minute_rate_limited={minute:.0f} ({when})"


def lost_workspace(body: Mapping[str, Any]) -> Lost | None:
    """The workspace an ``app_uninstalled`` or bot-token ``tokens_revoked`` event is about."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    kind = event.get("type")
    if kind not in LOST_EVENTS:
        return None
    if kind == "tokens_revoked":
        tokens = event.get("tokens")
        bots = tokens.get("bot") if isinstance(tokens, Mapping) else None
        if not bots:
            return None  # user tokens only: fanbot holds none
    team = team_of(body)
    return Lost(team_id=team, event=str(kind)) if team else None


def team_of(body: Mapping[str, Any]) -> str:
    """The workspace a body is for: ``team_id``, else the first authorization's."""
    team = body.get("team_id")
    if isinstance(team, str) and team:
        return team
    auths = body.get("authorizations")
    if isinstance(auths, list) and auths and isinstance(auths[0], Mapping):
        first = auths[0].get("team_id")
        if isinstance(first, str):
            return first
    return ""


def kind_of(body: Mapping[str, Any]) -> str:
    """A short name for a payload in a log line: ``event reaction_added``, ``shortcut``…"""
    event = body.get("event")
    if body.get("type") == "event_callback" and isinstance(event, Mapping):
        return f"event {str(event.get('type'))[:60]}"
    if "command" in body:
        return f"command {str(body.get('command'))[:60]}"
    return str(body.get("type") or "payload")[:60]
