"""The Web API half of the fake Slack: methods, recorded calls, posted messages, faults.

Pure state and answers (no sockets); :class:`bot.testing.fake_slack.FakeSlack` serves it
over HTTP under ``/api/<method>``.

Message metadata works as on Slack: ``chat.postMessage`` takes ``metadata`` (an object in
a JSON body or a JSON string in a form, ``{"event_type": …, "event_payload": {…}}``) and
keeps it with the message; ``conversations.replies`` (a thread, oldest first) and
``conversations.history`` (the channel root, newest first) return it on each message only
with ``include_all_metadata``. Both page with ``limit`` / ``cursor`` and filter with
``oldest`` / ``latest`` (exclusive unless ``inclusive``). The fake only knows the messages
the app posted: a thread root a test never posted through it is not listed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.testing import slack_wire as wire

MAX_TEXT_CHARS = 40_000


@dataclass(kw_only=True)
class ApiCall:
    """One Web API call as the fake saw it: method, merged arguments, HTTP status sent.

    ``at`` is ``time.monotonic()`` at arrival.
    """

    method: str
    args: dict[str, Any]
    token: str
    status: int = 200
    error: str | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass(kw_only=True)
class Posted:
    """A message the app posted (``edits`` lists earlier texts replaced by chat.update;
    ``deleted`` is set by chat.delete, after which the message is listed nowhere)."""

    channel: str
    ts: str
    text: str
    thread_ts: str | None = None
    ephemeral_to: str | None = None
    edits: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    deleted: bool = False
    blocks: list[dict[str, Any]] | None = None
    """Its Block Kit blocks as given (``chat.update`` with ``blocks`` replaces them)."""

    def buttons(self) -> list[dict[str, Any]]:
        """The button elements of its ``actions`` blocks (each with its ``block_id``)."""
        return [
            {**element, "block_id": block.get("block_id", "")}
            for block in self.blocks or []
            if block.get("type") == "actions"
            for element in block.get("elements", [])
            if element.get("type") == "button"
        ]

    def as_message(self, *, bot_user_id: str, bot_id: str, metadata: bool) -> dict[str, Any]:
        """The message object as the Web API returns it (``metadata`` only if asked for)."""
        message: dict[str, Any] = {"type": "message", "user": bot_user_id, "bot_id": bot_id}
        message |= {"text": self.text, "ts": self.ts}
        if self.blocks is not None:
            message["blocks"] = self.blocks
        if self.thread_ts:
            message["thread_ts"] = self.thread_ts
        if metadata and self.metadata is not None:
            message["metadata"] = self.metadata
        return message


@dataclass(kw_only=True)
class Fault:
    """An injected failure for ``times`` calls of one method, after ``after`` succeed.

    With ``when``, only calls whose arguments it accepts count (for ``after`` too).
    """

    status: int = 200
    error: str = "internal_error"
    retry_after: float | None = None
    times: int = 1
    after: int = 0
    when: Callable[[dict[str, Any]], bool] | None = None


@dataclass(kw_only=True)
class ApiReply:
    """An HTTP answer: a JSON ``body`` or an ``html`` error page."""

    status: int = 200
    body: dict[str, Any] | None = None
    html: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


class WebApi:
    """Slack Web API methods over in-memory state.

    Args:
        socket_url: Builds the ``wss`` URL for a ticket (``apps.connections.open``).
        on_post: Called with every message the app posts (to echo it as an event).
    """

    def __init__(
        self,
        *,
        team_id: str,
        bot_user_id: str,
        bot_id: str,
        bot_token: str,
        app_token: str,
        socket_url: Callable[[str], str],
        on_post: Callable[[Posted], None] | None = None,
    ) -> None:
        self.team_id, self.bot_user_id, self.bot_id = team_id, bot_user_id, bot_id
        self.bot_token, self.app_token = bot_token, app_token
        self.socket_url, self.on_post = socket_url, on_post
        self.calls: list[ApiCall] = []
        self.messages: list[Posted] = []
        self.ephemerals: list[Posted] = []
        self.statuses: list[dict[str, Any]] = []
        self.missing_channels: set[str] = set()
        self._faults: dict[str, list[Fault]] = {}
        self._tickets: set[str] = set()
        self.extra_methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        """More methods (``name -> args -> answer``), e.g. the files ones."""

    def use_ticket(self, ticket: str) -> bool:
        """Consume a socket ticket; ``False`` when unknown or already used."""
        if ticket not in self._tickets:
            return False
        self._tickets.discard(ticket)
        return True

    def fail(
        self,
        method: str,
        *,
        status: int = 429,
        error: str | None = None,
        retry_after: float | None = 1,
        times: int = 1,
        after: int = 0,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Make ``times`` calls of ``method`` fail, once ``after`` more calls succeeded.

        ``status=429`` answers ``ratelimited`` with ``Retry-After``; a 5xx answers an HTML
        error page; ``status=200`` answers ``{"ok": false, "error": error}``. ``after``
        lets a fault hit the middle of a multi-part send; ``when`` limits the fault to
        calls whose arguments it accepts (e.g. ``lambda a: "finished" in a["text"]``).
        """
        default = "ratelimited" if status == 429 else "internal_error"
        fault = Fault(
            status=status,
            error=error or default,
            retry_after=retry_after,
            times=times,
            after=after,
            when=when,
        )
        self._faults.setdefault(method, []).append(fault)

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    def thread(self, channel: str, thread_ts: str | None) -> list[Posted]:
        """Messages the app posted in one thread (``None``: the channel root), in order."""
        return [m for m in self.messages if m.channel == channel and m.thread_ts == thread_ts]

    def handle(self, method: str, args: dict[str, Any], token: str) -> ApiReply:
        """Answer one call (recorded in :attr:`calls`), injected faults first."""
        call = ApiCall(method=method, args=args, token=token)
        self.calls.append(call)
        return self._fault(method, call) or self._dispatch(method, args, token, call)

    def _fault(self, method: str, call: ApiCall) -> ApiReply | None:
        queue = self._faults.get(method)
        fault = next((f for f in queue or () if f.when is None or f.when(call.args)), None)
        if queue is None or fault is None:
            return None
        if fault.after > 0:
            fault.after -= 1
            return None
        fault.times -= 1
        if fault.times <= 0:
            queue.remove(fault)
        call.status, call.error = fault.status, fault.error
        if fault.status == 429:
            headers = {"Retry-After": str(int(fault.retry_after or 1))}
            return _error(fault.error, status=429, headers=headers)
        if fault.status >= 500:
            return ApiReply(status=fault.status, html=f"<h1>{fault.status} upstream trouble</h1>")
        return _error(fault.error, status=fault.status)

    def _dispatch(self, method: str, args: dict[str, Any], token: str, call: ApiCall) -> ApiReply:
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            call.error = "not_allowed_token_type" if token else "not_authed"
            if token and token not in (self.app_token, self.bot_token):
                call.error = "invalid_auth"
            return _error(call.error)
        handler = _METHODS.get(method)
        extra = self.extra_methods.get(method)
        if handler is None and extra is None:
            call.error = "unknown_method"
            return _error("unknown_method")
        result = handler(self, args) if handler is not None else extra(args)  # type: ignore[misc]
        if not result.get("ok"):
            call.error = str(result.get("error"))
        return ApiReply(body=result)

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake.slack.invalid/",
            "team": "Fake Team",
            "user": "fanbot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _check_text(self, args: dict[str, Any]) -> str | None:
        channel = str(args.get("channel") or "")
        if not channel or channel in self.missing_channels:
            return "channel_not_found"
        text = args.get("text")
        if not text and not args.get("blocks"):
            return "no_text"
        if isinstance(text, str) and len(text) > MAX_TEXT_CHARS:
            return "msg_too_long"
        return None

    def _post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        if error := self._check_text(args):
            return {"ok": False, "error": error}
        try:
            metadata = _metadata(args.get("metadata"))
            blocks = _blocks(args.get("blocks"))
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        posted = _posted(args, metadata=metadata, blocks=blocks)
        self.messages.append(posted)
        if self.on_post is not None:
            self.on_post(posted)
        message = self._message(posted, metadata=True)
        return {"ok": True, "channel": posted.channel, "ts": posted.ts, "message": message}

    def _message(self, posted: Posted, *, metadata: bool) -> dict[str, Any]:
        return posted.as_message(
            bot_user_id=self.bot_user_id, bot_id=self.bot_id, metadata=metadata
        )

    def _replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(args.get("channel") or ""), str(args.get("ts") or "")
        if not channel or channel in self.missing_channels:
            return {"ok": False, "error": "channel_not_found"}
        if not ts:
            return {"ok": False, "error": "invalid_arguments"}
        found = [
            m
            for m in self.messages
            if m.channel == channel and ts in (m.ts, m.thread_ts) and not m.deleted
        ]
        return self._page(sorted(found, key=lambda m: float(m.ts)), args)

    def _history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel or channel in self.missing_channels:
            return {"ok": False, "error": "channel_not_found"}
        found = [
            m
            for m in self.messages
            if m.channel == channel and m.thread_ts in (None, m.ts) and not m.deleted
        ]
        return self._page(sorted(found, key=lambda m: float(m.ts), reverse=True), args)

    def _page(self, messages: list[Posted], args: dict[str, Any]) -> dict[str, Any]:
        """One page of ``messages`` after the time filter (``oldest`` / ``latest``)."""
        inclusive = _flag(args.get("inclusive"))
        oldest, latest = float(args.get("oldest") or 0), args.get("latest")
        newest = float(latest) if latest else float("inf")

        def within(m: Posted) -> bool:
            t = float(m.ts)
            if inclusive:
                return oldest <= t <= newest
            return oldest < t < newest

        selected = [m for m in messages if within(m)]
        start = int(str(args.get("cursor") or "0").removeprefix("offset:") or 0)
        limit = max(1, min(int(args.get("limit") or 100), 1000))
        page, rest = selected[start : start + limit], selected[start + limit :]
        metadata = _flag(args.get("include_all_metadata"))
        cursor = f"offset:{start + limit}" if rest else ""
        return {
            "ok": True,
            "messages": [self._message(m, metadata=metadata) for m in page],
            "has_more": bool(rest),
            "response_metadata": {"next_cursor": cursor},
        }

    def _post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        if error := self._check_text(args):
            return {"ok": False, "error": error}
        if not args.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        posted = _posted(args, ephemeral_to=str(args["user"]))
        self.ephemerals.append(posted)
        return {"ok": True, "message_ts": posted.ts}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        if error := self._check_text(args):
            return {"ok": False, "error": error}
        try:
            blocks = _blocks(args.get("blocks"))
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        for posted in self._live():
            if posted.channel == args["channel"] and posted.ts == str(args.get("ts")):
                posted.edits.append(posted.text)
                posted.text = str(args.get("text", ""))
                if "blocks" in args:
                    posted.blocks = blocks
                return {"ok": True, "channel": posted.channel, "ts": posted.ts, "text": posted.text}
        return {"ok": False, "error": "message_not_found"}

    def _delete(self, args: dict[str, Any]) -> dict[str, Any]:
        for posted in self._live():
            if posted.channel == args.get("channel") and posted.ts == str(args.get("ts")):
                posted.deleted = True
                return {"ok": True, "channel": posted.channel, "ts": posted.ts}
        return {"ok": False, "error": "message_not_found"}

    def _permalink(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(args.get("channel") or ""), str(args.get("message_ts") or "")
        for posted in self._live():
            if posted.channel == channel and posted.ts == ts:
                link = f"https://fake.slack.invalid/archives/{channel}/p{ts.replace('.', '')}"
                if posted.thread_ts and posted.thread_ts != ts:
                    link += f"?thread_ts={posted.thread_ts}&cid={channel}"
                return {"ok": True, "channel": channel, "permalink": link}
        return {"ok": False, "error": "message_not_found"}

    def _live(self) -> list[Posted]:
        return [m for m in self.messages if not m.deleted]

    def _set_status(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("channel_id") or not args.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments"}
        self.statuses.append(dict(args))
        return {"ok": True}

    def _connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        ticket = secrets.token_hex(8)
        self._tickets.add(ticket)
        return {"ok": True, "url": self.socket_url(ticket)}

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel or channel in self.missing_channels:
            return {"ok": False, "error": "channel_not_found"}
        kind = channel[:1]
        info = {"id": channel, "is_im": kind == "D", "is_channel": kind == "C"}
        info |= {"is_private": kind == "G", "is_member": True, "name": channel.lower()}
        return {"ok": True, "channel": info}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user") or "")
        if not user:
            return {"ok": False, "error": "user_not_found"}
        profile = {"display_name": user.lower(), "real_name": user.lower()}
        is_bot = user == self.bot_user_id
        return {"ok": True, "user": {"id": user, "is_bot": is_bot, "profile": profile}}


def _flag(value: Any) -> bool:
    """A boolean argument as clients send it: ``true``, ``1``, ``"1"``, ``"true"``."""
    return value is True or str(value).lower() in ("1", "true")


_BUTTON_STYLES = frozenset({"primary", "danger"})


def _blocks(value: Any) -> list[dict[str, Any]] | None:
    """``blocks`` as given (a JSON string in a form), checked the way Slack checks the
    blocks this fake knows: ``section``/``context`` text and ``actions`` buttons
    (``invalid_blocks`` otherwise)."""
    if value is None:
        return None
    try:
        blocks = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        raise ValueError("invalid_blocks_format") from None
    if not isinstance(blocks, list) or len(blocks) > 50:
        raise ValueError("invalid_blocks")
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") not in (
            "section",
            "actions",
            "context",
        ):
            raise ValueError("invalid_blocks")
        for button in block.get("elements", []) if block["type"] == "actions" else []:
            label = (button.get("text") or {}) if isinstance(button, dict) else {}
            ok = (
                button.get("type") == "button" and label.get("type") == "plain_text"
                and 0 < len(str(label.get("text", ""))) <= 75
                and 0 < len(str(button.get("action_id", ""))) <= 255
                and len(str(button.get("value", ""))) <= 2000
                and button.get("style", "primary") in _BUTTON_STYLES
            )  # fmt: skip
            if not ok:
                raise ValueError("invalid_blocks")
    return blocks


def _posted(
    args: dict[str, Any],
    *,
    metadata: dict[str, Any] | None = None,
    blocks: list[dict[str, Any]] | None = None,
    ephemeral_to: str | None = None,
) -> Posted:
    """The message a ``chat.postMessage`` / ``chat.postEphemeral`` call posts (a new ``ts``)."""
    thread_ts = args.get("thread_ts") or None
    return Posted(
        channel=str(args["channel"]),
        ts=wire.new_ts(),
        text=str(args.get("text", "")),
        thread_ts=str(thread_ts) if thread_ts else None,
        ephemeral_to=ephemeral_to,
        metadata=metadata,
        blocks=blocks,
    )


def _metadata(value: Any) -> dict[str, Any] | None:
    """``metadata`` as posted (``None`` when absent); ``ValueError`` when malformed."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict) or not isinstance(value.get("event_type"), str):
        raise ValueError("metadata needs an event_type")
    if not isinstance(value.get("event_payload"), dict):
        raise ValueError("metadata needs an event_payload object")
    return {"event_type": value["event_type"], "event_payload": dict(value["event_payload"])}


def _error(error: str, *, status: int = 200, headers: dict[str, str] | None = None) -> ApiReply:
    return ApiReply(status=status, body={"ok": False, "error": error}, headers=headers or {})


_METHODS = {
    "auth.test": WebApi._auth_test,
    "chat.postMessage": WebApi._post_message,
    "chat.postEphemeral": WebApi._post_ephemeral,
    "chat.update": WebApi._update,
    "chat.delete": WebApi._delete,
    "chat.getPermalink": WebApi._permalink,
    "assistant.threads.setStatus": WebApi._set_status,
    "apps.connections.open": WebApi._connections_open,
    "conversations.info": WebApi._conversations_info,
    "conversations.replies": WebApi._replies,
    "conversations.history": WebApi._history,
    "users.info": WebApi._users_info,
}
