"""Exactly-once parts on Slack: each part says which outbox entry it belongs to.

Every public part is posted with message metadata (``event_type`` ``fanbot_outbox``,
``event_payload`` ``{"key": <outbox key>, "part": <index>}``). When egress is in doubt
whether a part went out (a gateway died between Slack accepting it and Redis recording
it), :func:`find_posted` reads the thread (``conversations.replies``) or, for a message at
the channel root, the channel (``conversations.history``) with ``include_all_metadata``
and returns the parts already there, so they are recorded instead of posted again. This
needs the ``channels:history`` / ``groups:history`` / ``im:history`` scopes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

EVENT_TYPE = "fanbot_outbox"
CLOCK_SKEW_SECONDS = 120.0  # Slack's clock against the Redis host's, generously
PAGE = 200
MAX_PAGES = 25  # 5,000 messages posted since the entry was written: more is not a thread


def metadata(key: str, index: int) -> dict[str, Any]:
    """The ``metadata`` argument of ``chat.postMessage`` for part ``index`` of ``key``."""
    return {"event_type": EVENT_TYPE, "event_payload": {"key": key, "part": index}}


def refused(exc: BaseException) -> bool:
    """Slack answered the lookup with a definite no (``missing_scope``, ``thread_not_found``
    …), as opposed to "not now" (429, 5xx, no connection): looking again will not help."""
    if not isinstance(exc, SlackApiError):
        return False
    status = int(getattr(exc.response, "status_code", 0) or 0)
    data = getattr(exc.response, "data", None)
    error = data.get("error") if isinstance(data, dict) else None
    return status < 500 and status != 429 and error != "ratelimited"


def parts_in(messages: Iterable[Mapping[str, Any]], key: str) -> dict[int, str]:
    """Part index -> ``ts`` of the messages that carry ``key``'s metadata (pure)."""
    found: dict[int, str] = {}
    for message in messages:
        meta = message.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("event_type") != EVENT_TYPE:
            continue
        payload = meta.get("event_payload")
        if not isinstance(payload, Mapping) or payload.get("key") != key:
            continue
        index = payload.get("part")
        if isinstance(index, int) and not isinstance(index, bool) and "ts" in message:
            found.setdefault(index, str(message["ts"]))
    return found


async def find_posted(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str | None,
    key: str,
    since: float | None,
) -> dict[int, str]:
    """The parts of ``key`` already in the thread (or channel root); raises what the SDK
    raises (``SlackApiError``, connection errors)."""
    oldest = f"{max(0.0, since - CLOCK_SKEW_SECONDS):.6f}" if since else None
    found: dict[int, str] = {}
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        args: dict[str, Any] = {
            "channel": channel,
            "include_all_metadata": True,
            "limit": PAGE,
            "oldest": oldest,
            "cursor": cursor,
        }
        if thread_ts:
            page = await client.conversations_replies(ts=thread_ts, **args)
        else:
            page = await client.conversations_history(**args)
        for index, ts in parts_in(page.get("messages") or [], key).items():
            found.setdefault(index, ts)
        cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
        if not cursor:
            break
    return found
