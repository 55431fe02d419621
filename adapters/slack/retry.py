"""Rate limits and failures of the Slack Web API, in fanbot's terms.

Two layers, both bounded: the SDK client waits out one short ``429`` itself
(:class:`BoundedRateLimitRetryHandler`); anything longer or repeated becomes a
:class:`~bot.errors.DeliveryError` carrying ``retry_after`` so the gateway's outbox retries
later without blocking other deliveries.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.errors import DeliveryError

# Errors no retry can fix (https://api.slack.com/methods/chat.postMessage#errors).
PERMANENT_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "msg_too_long",
        "no_text",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "missing_scope",
        "restricted_action",
        "message_not_found",
        "cant_update_message",
        "user_not_in_channel",
        "invalid_blocks",
        "invalid_arguments",
    }
)

TRANSIENT_EXCEPTIONS = (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError)


def retry_after_seconds(headers: Any) -> float | None:
    """The ``Retry-After`` header as seconds, or ``None`` when absent or unreadable."""
    if headers is None:
        return None
    for key in headers:
        if str(key).lower() == "retry-after":
            value = headers[key]
            if isinstance(value, list | tuple):
                value = value[0] if value else None
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


class BoundedRateLimitRetryHandler(AsyncRetryHandler):
    """Retry a ``429`` once, in the client, when Slack asks for at most ``max_wait`` s.

    Args:
        max_wait: Longest ``Retry-After`` worth waiting for inside one send.
    """

    def __init__(self, *, max_wait: float) -> None:
        super().__init__(max_retry_count=1)
        self.max_wait = max_wait

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code != 429:
            return False
        wait = retry_after_seconds(response.headers)
        return wait is not None and wait <= self.max_wait

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        wait = retry_after_seconds(response.headers if response is not None else None)
        state.next_attempt_requested = True
        await asyncio.sleep(wait or 0.0)
        state.increment_current_attempt()


def delivery_error(exc: BaseException, *, posted: int = 0) -> DeliveryError:
    """Translate a Web API failure into a :class:`DeliveryError`.

    Args:
        exc: What the SDK raised.
        posted: Parts of a split message already posted before the failure.
    """
    suffix = f" after {posted} part(s) were posted" if posted else ""
    if not isinstance(exc, SlackApiError):
        return DeliveryError(f"Slack unreachable: {type(exc).__name__}{suffix}")
    response = exc.response
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    error = str(data.get("error", "")) if isinstance(data, dict) else ""
    if status == 429 or error == "ratelimited":
        wait = retry_after_seconds(getattr(response, "headers", None))
        return DeliveryError(
            f"Slack rate limit (retry after {wait}s){suffix}", retry_after=wait or 1.0
        )
    message = f"Slack API error {status} {error or '(no error code)'}{suffix}"
    return DeliveryError(message, permanent=status < 500 and error in PERMANENT_ERRORS)
