"""A protocol-level fake of the Telegram Bot API, reached by real clients over HTTP.

:class:`FakeTelegram` serves ``/bot<token>/<method>`` on a free loopback port and speaks the
wire protocol (form, multipart or JSON parameters in; ``{"ok": ..., "result": ...}`` out) so
an unmodified SDK such as python-telegram-bot works against it through its ``base_url``::

    async with FakeTelegram() as tg:
        bot = telegram.Bot(tg.token, base_url=tg.api_url)
        tg.push(tg.message(chat=forum(-100), text="hi", thread_id=5))
        ...
        assert tg.messages[0].message_thread_id == 5

Modelled: ``getMe``, ``getUpdates`` long polling (an ``offset`` confirms and drops older
updates; a newer poll ends an older one with 409), webhook delivery with the secret-token
header once ``setWebhook`` was called, ``sendMessage``/``editMessageText`` with Telegram's
checks (unknown chat or topic, ``message_thread_id`` 1, HTML parse errors, 4096 UTF-16
units), ``deleteMessage`` (the message stays in :attr:`FakeTelegram.messages`, marked
``deleted``), ``sendChatAction``, ``setMyCommands``/``getMyCommands``, ``deleteWebhook``,
``getWebhookInfo``, inline keyboards (``reply_markup`` checked and kept on the message; an
edit without one removes it), button presses (:meth:`FakeTelegram.callback_query` builds
the ``callback_query`` update; any pushed or :meth:`FakeTelegram.know`-n query counts) and ``answerCallbackQuery`` (each query answered once,
recorded in :attr:`FakeTelegram.callback_answers`). :meth:`FakeTelegram.inject` makes the next calls fail (429 with
``retry_after``, 5xx, any 400), optionally only those whose parameters match;
:meth:`FakeTelegram.pause` / :meth:`FakeTelegram.resume` take the server off the network
(connection refused) and back on the same port with its state kept. Every call is recorded
in :attr:`FakeTelegram.calls` with its time and the HTTP status it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import ClientSession, web

from bot.testing.netutil import FakeServer, bind_loopback
from bot.testing.telegram_files import FileApiError, TelegramFiles
from bot.testing.telegram_html import HtmlParseError, utf16_len, visible_text
from bot.testing.telegram_objects import detect_entities, forum, group, private, user

__all__ = [
    "ApiCall",
    "CallbackAnswer",
    "FakeTelegram",
    "SentMessage",
    "forum",
    "group",
    "private",
    "user",
]

MAX_TEXT = 4096
_INT_FIELDS = frozenset(
    {"chat_id", "message_thread_id", "message_id", "offset", "limit", "timeout"}
)
_JSON_FIELDS = frozenset(
    {"entities", "commands", "allowed_updates", "reply_markup", "reply_parameters"}
    | {"link_preview_options", "scope", "drop_pending_updates", "disable_notification"}
    | {"show_alert"}
)
_ACTIONS = frozenset({"typing", "upload_photo", "record_video", "upload_document"})


class _ApiError(Exception):
    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


@dataclass(kw_only=True)
class ApiCall:
    """One request the client made: method name, decoded parameters, when, and the answer.

    ``at`` is ``time.monotonic()`` at arrival; ``status`` the HTTP status sent back.
    """

    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    status: int = 200


@dataclass(kw_only=True)
class SentMessage:
    """A message the bot posted, as Telegram stored it (``text`` is what readers see)."""

    message_id: int
    chat_id: int
    message_thread_id: int | None
    text: str
    raw_text: str
    parse_mode: str | None
    edits: list[str] = field(default_factory=list)
    deleted: bool = False
    """Set by ``deleteMessage``; the message can no longer be edited or deleted."""
    reply_to: int | None = None
    """The message it replies to (``reply_parameters.message_id``); in a supergroup it then
    belongs to that message's reply thread."""
    reply_markup: dict[str, Any] | None = None
    """Its inline keyboard (``{"inline_keyboard": [[button, ...], ...]}``), if any; an
    ``editMessageText`` without one removes it, as Telegram does."""

    def buttons(self) -> list[dict[str, Any]]:
        """Its inline keyboard's buttons, row by row."""
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [button for row in rows for button in row]


@dataclass(kw_only=True)
class CallbackAnswer:
    """An ``answerCallbackQuery`` call: what the person who pressed saw."""

    callback_query_id: str
    text: str
    show_alert: bool


@dataclass(kw_only=True)
class _Injection:
    status: int
    description: str
    retry_after: int | None
    times: int
    after: int
    when: Callable[[dict[str, Any]], bool] | None = None


class FakeTelegram(FakeServer):
    """The fake Bot API server; use as ``async with FakeTelegram() as tg``.

    Args:
        token: The bot token clients must put in the URL.
        bot_id: The bot's user id (also the token's numeric prefix in real tokens).
        username: The bot's @username, without the ``@``.
    """

    def __init__(
        self, *, token: str = "4242:FAKE-token", bot_id: int = 4242, username: str = "fanbot_bot"
    ) -> None:
        self.token, self.bot_id, self.username = token, bot_id, username
        self.me: dict[str, Any] = {
            "id": bot_id, "is_bot": True, "first_name": "fanbot", "username": username,
            "can_join_groups": True, "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }  # fmt: skip
        self.calls: list[ApiCall] = []
        self.messages: list[SentMessage] = []
        self.callback_answers: list[CallbackAnswer] = []
        self.topics_created: list[tuple[int, int, str]] = []
        """``(chat id, message_thread_id, name)`` of each ``createForumTopic``."""
        self._callbacks: dict[str, bool] = {}  # query id -> answered
        self.files = TelegramFiles(token=token)
        """Files to post (:meth:`TelegramFiles.document`), downloads, sent documents."""
        self.commands: list[dict[str, Any]] = []
        self.webhook_url = ""
        self.webhook_secret: str | None = None
        self.webhook_deliveries: list[tuple[int, int]] = []
        self._pending: list[dict[str, Any]] = []
        self._chats: dict[int, dict[str, Any]] = {}
        self._topics: dict[int, set[int]] = {}
        self._injections: dict[str, list[_Injection]] = {}
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(1000)
        self._wakeup = asyncio.Event()
        self._poll_generation = 0
        self._long_polls = 0
        self._closing = False
        self._runner = None
        self._client: ClientSession | None = None
        self._delivery: asyncio.Task[None] | None = None
        self._port = 0
        self._paused = False
        self.base_url = ""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await self._listen()
        self.base_url = self.url
        self._client = ClientSession()

    async def _listen(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_routes([self.files.route()])
        # No access log: its lines would carry the token (it is in every path).
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        sock = bind_loopback(port=self._port)
        await web.SockSite(runner, sock).start()
        self._port, self._runner = sock.getsockname()[1], runner

    async def pause(self) -> None:
        """Go off the network: close the port and every connection (clients get refused).

        Pending long polls end at once (with what is pending). State is kept for
        :meth:`resume`; webhook delivery waits meanwhile.
        """
        self._paused = True
        self._wakeup.set()
        await self._close_port()

    async def resume(self) -> None:
        """Listen again on the same port, with every chat, update and message kept."""
        if self._runner is None:
            await self._listen()
        self._paused = False
        self._kick_delivery()

    async def stop(self) -> None:
        self._closing = True
        self._wakeup.set()
        if self._delivery is not None:
            self._delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._delivery
        if self._client is not None:
            await self._client.close()
        await self._close_port()

    @property
    def api_url(self) -> str:
        """Value for the SDK's ``base_url`` (the SDK appends the token)."""
        return f"{self.base_url}/bot"

    @property
    def file_url(self) -> str:
        """Value for the SDK's ``base_file_url``."""
        return f"{self.base_url}/file/bot"

    # -- test-side controls ----------------------------------------------------------------
    def message(
        self, *, chat: dict[str, Any], text: str, sender: dict[str, Any] | None = None,
        thread_id: int | None = None, reply_to: dict[str, Any] | None = None,
        edited: bool = False, **extra: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """Build an update carrying a text message, with entities as Telegram detects them.

        ``thread_id`` in a forum chat makes it a topic message (``is_topic_message``);
        ``reply_to`` is the replied-to message object (e.g. one from :attr:`messages` via
        :meth:`as_message`).
        """
        msg: dict[str, Any] = {
            "message_id": next(self._ids), "date": int(time.time()), "chat": chat,
            "from": sender or user(1001, "Ann", username="ann"), "text": text,
        }  # fmt: skip
        if thread_id is not None:
            msg["message_thread_id"] = thread_id
            msg["is_topic_message"] = bool(chat.get("is_forum"))
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        if entities := detect_entities(text):
            msg["entities"] = entities
        if edited:
            msg["edit_date"] = int(time.time())
        msg.update(extra)
        return {"edited_message" if edited else "message": msg}

    def callback_query(
        self, sent: SentMessage, data: str, *, sender: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Build the update of a press of the button with ``callback_data`` ``data`` under
        ``sent`` (a message with an inline keyboard; raises if it has no such button)."""
        if not any(b.get("callback_data") == data for b in sent.buttons()):
            raise AssertionError(f"message {sent.message_id} has no button {data!r}")
        query_id = str(next(self._ids) * 1000 + 7)
        self._callbacks[query_id] = False
        return {
            "callback_query": {
                "id": query_id, "from": sender or user(1001, "Ann", username="ann"),
                "message": self._message_json(sent), "chat_instance": f"ci{sent.chat_id}",
                "data": data,
            }
        }  # fmt: skip

    def as_message(self, sent: SentMessage) -> dict[str, Any]:
        """The Telegram ``Message`` object of a message the bot sent (for ``reply_to``)."""
        return self._message_json(sent)

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for the bot (getUpdates or webhook); assigns ``update_id``."""
        update.setdefault("update_id", next(self._update_ids))
        self.know(update)
        self._pending.append(update)
        self._wakeup.set()
        self._kick_delivery()
        return update

    def know(self, update: dict[str, Any]) -> None:
        """Know what ``update`` shows, as Telegram does when it sends it: its message's chat
        and forum topic, its callback query (unanswered). :meth:`push` calls it; a test that
        POSTs an update to a webhook itself calls it first."""
        for value in update.values():
            if isinstance(value, dict) and isinstance(value.get("chat"), dict):
                self._register(value)
        query = update.get("callback_query")
        if isinstance(query, dict) and isinstance(query.get("id"), str):
            self._callbacks.setdefault(query["id"], False)
            if isinstance(query.get("message"), dict) and isinstance(
                query["message"].get("chat"), dict
            ):
                self._register(query["message"])

    def add_chat(self, chat: dict[str, Any]) -> None:
        """Make ``chat`` known (as if the bot had been added to it)."""
        self._chats[int(chat["id"])] = chat

    def add_topic(self, chat: dict[str, Any], thread_id: int) -> None:
        """Make ``thread_id`` a known topic of ``chat`` (as if created in the app)."""
        self._chats[int(chat["id"])] = chat
        self._topics.setdefault(int(chat["id"]), set()).add(thread_id)

    def inject(
        self, method: str, *, status: int = 429, description: str | None = None,
        retry_after: int | None = None, times: int = 1, after: int = 0,
        when: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:  # fmt: skip
        """Make ``times`` calls of ``method`` fail with ``status``, after ``after`` succeed.

        A 429 carries ``parameters.retry_after`` (default 1) like Telegram's flood control.
        With ``when``, only calls whose decoded parameters it accepts count (for ``after``
        too) and fail; e.g. ``when=lambda p: "finished" in p["text"]`` fails announces only.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        text = description or (
            f"Too Many Requests: retry after {retry_after}"
            if status == 429
            else "Internal Server Error"
        )
        entry = _Injection(
            status=status, description=text, retry_after=retry_after, times=times, after=after,
            when=when,
        )  # fmt: skip
        self._injections.setdefault(method, []).append(entry)

    def calls_to(self, method: str) -> list[ApiCall]:
        """The recorded calls of one method, oldest first."""
        return [call for call in self.calls if call.method == method]

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by the bot."""
        return list(self._pending)

    @property
    def long_polls(self) -> int:
        """``getUpdates`` requests waiting for an update right now."""
        return self._long_polls

    # -- HTTP ------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        method = request.match_info["method"]
        params = _decode(dict(request.query) | await _body(request))
        call = ApiCall(method=method, params=params)
        self.calls.append(call)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            call.status = 404
            return _reply(404, {"ok": False, "error_code": 404, "description": "Not Found"})
        try:
            self._injected(method, params)
            result = await handler(params)
        except FileApiError as err:
            call.status = err.status
            return _reply(err.status, {"ok": False, "error_code": err.status,
                                       "description": err.description})  # fmt: skip
        except _ApiError as err:
            call.status = err.status
            payload: dict[str, Any] = {
                "ok": False, "error_code": err.status, "description": err.description,
            }  # fmt: skip
            if err.retry_after is not None:
                payload["parameters"] = {"retry_after": err.retry_after}
            return _reply(err.status, payload)
        return _reply(200, {"ok": True, "result": result})

    def _injected(self, method: str, params: dict[str, Any]) -> None:
        queue = self._injections.get(method)
        head = next((i for i in queue or () if i.when is None or i.when(params)), None)
        if queue is None or head is None:
            return
        if head.after > 0:
            head.after -= 1
            return
        head.times -= 1
        if head.times <= 0:
            queue.remove(head)
        raise _ApiError(head.status, head.description, head.retry_after)

    # -- methods ---------------------------------------------------------------------------
    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return self.me

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook_url:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is "
                            "active; use deleteWebhook to delete the webhook first")  # fmt: skip
        offset, limit = params.get("offset", 0), params.get("limit", 100) or 100
        if offset > 0:
            self._pending = [u for u in self._pending if u["update_id"] >= offset]
        self._poll_generation += 1
        mine = self._poll_generation
        self._wakeup.set()  # ends an older poll, which then sees it was superseded
        await asyncio.sleep(0)
        self._wakeup.clear()
        if not self._pending and not self._closing and not self._paused:
            self._long_polls += 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), params.get("timeout", 0) or 0)
            finally:
                self._long_polls -= 1
        if mine != self._poll_generation:
            raise _ApiError(409, "Conflict: terminated by other getUpdates request; make sure "
                            "that only one bot instance is running")  # fmt: skip
        return self._pending[:limit]

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat_id, thread_id = self._destination(params)
        raw, mode, text = _message_text(params, too_long="message is too long")
        sent = SentMessage(
            message_id=next(self._ids), chat_id=chat_id, message_thread_id=thread_id,
            text=text, raw_text=raw, parse_mode=mode, reply_to=self._reply_to(params),
            reply_markup=_inline_keyboard(params.get("reply_markup")),
        )  # fmt: skip
        self.messages.append(sent)
        return self._message_json(sent)

    async def _api_createForumTopic(self, params: dict[str, Any]) -> Any:
        chat_id, name = params.get("chat_id"), str(params.get("name", ""))
        chat = self._chats.get(chat_id) if isinstance(chat_id, int) else None
        if chat is None or not isinstance(chat_id, int):
            raise _ApiError(400, "Bad Request: chat not found")
        if not chat.get("is_forum"):
            raise _ApiError(400, "Bad Request: the chat is not a forum")
        if not 1 <= len(name) <= 128:
            raise _ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY")
        thread_id = next(self._ids)  # a topic's id is the id of its service message
        if thread_id == 1:  # never the General topic's id
            thread_id = next(self._ids)
        self._topics.setdefault(chat_id, set()).add(thread_id)
        self.topics_created.append((chat_id, thread_id, name))
        return {"message_thread_id": thread_id, "name": name, "icon_color": 7322096}

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id", ""))
        if self._callbacks.get(query_id, True):  # unknown, or answered already
            raise _ApiError(400, "Bad Request: query is too old and response timeout expired "
                            "or query ID is invalid")  # fmt: skip
        text = str(params.get("text", ""))
        if len(text) > 200:
            raise _ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self._callbacks[query_id] = True
        answer = CallbackAnswer(
            callback_query_id=query_id, text=text, show_alert=bool(params.get("show_alert"))
        )
        self.callback_answers.append(answer)
        return True

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        return self.files.get_file(params)

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        chat_id, thread_id = self._destination(params)
        sent = self.files.send_document(
            params, message_id=next(self._ids), chat_id=chat_id, thread_id=thread_id
        )
        shell = SentMessage(
            message_id=sent.message_id, chat_id=chat_id, message_thread_id=thread_id,
            text="", raw_text="", parse_mode=None,
        )  # fmt: skip
        msg = self._message_json(shell)
        msg.pop("text")
        msg["document"] = {
            "file_id": f"SENT{sent.message_id}", "file_unique_id": f"S{sent.message_id}",
            "file_name": sent.filename, "file_size": len(sent.data),
        }  # fmt: skip
        return msg

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        sent = self._find(params)
        if sent is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        raw, mode, text = _message_text(params, too_long="MESSAGE_TOO_LONG")
        markup = _inline_keyboard(params.get("reply_markup"))
        if text == sent.text and markup == sent.reply_markup:
            raise _ApiError(400, "Bad Request: message is not modified: specified new message "
                            "content and reply markup are exactly the same as a current content "
                            "and reply markup of the message")  # fmt: skip
        sent.reply_markup = markup
        sent.edits.append(text)
        sent.text, sent.raw_text, sent.parse_mode = text, raw, mode
        return self._message_json(sent)

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        sent = self._find(params)
        if sent is None:
            raise _ApiError(400, "Bad Request: message to delete not found")
        sent.deleted = True
        return True

    def _find(self, params: dict[str, Any]) -> SentMessage | None:
        """The live message ``params`` name by ``chat_id`` and ``message_id``."""
        key = (params.get("chat_id"), params.get("message_id"))
        return next(
            (m for m in self.messages if (m.chat_id, m.message_id) == key and not m.deleted),
            None,
        )

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        self._destination(params)
        if params.get("action") not in _ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        self.commands = list(params.get("commands") or [])
        return True

    async def _api_getMyCommands(self, params: dict[str, Any]) -> Any:
        return self.commands

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook_url, self.webhook_secret = "", None
        if params.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        secret = params.get("secret_token")
        if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        self.webhook_url, self.webhook_secret = str(params.get("url", "")), secret
        if params.get("drop_pending_updates"):
            self._pending.clear()
        self._kick_delivery()
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return {
            "url": self.webhook_url, "has_custom_certificate": False,
            "pending_update_count": len(self._pending),
        }  # fmt: skip

    # -- internals -------------------------------------------------------------------------
    def _destination(self, params: dict[str, Any]) -> tuple[int, int | None]:
        chat_id, thread_id = params.get("chat_id"), params.get("message_thread_id")
        if not isinstance(chat_id, int) or chat_id not in self._chats:
            raise _ApiError(400, "Bad Request: chat not found")
        if thread_id is not None and thread_id not in self._topics.get(chat_id, set()):
            # The General topic (id 1) included: Telegram wants no thread id for it.
            raise _ApiError(400, "Bad Request: message thread not found")
        return chat_id, thread_id

    def _reply_to(self, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters")
        if not isinstance(reply, dict):
            return None
        target = reply.get("message_id")
        known = any(m.message_id == target for m in self.messages)
        if not known and not reply.get("allow_sending_without_reply"):
            raise _ApiError(400, "Bad Request: message to be replied not found")
        return target if isinstance(target, int) else None

    def _register(self, msg: dict[str, Any]) -> None:
        chat = msg["chat"]
        if not isinstance(chat.get("id"), int):
            return  # not a chat Telegram would send; nothing to know
        self._chats[int(chat["id"])] = chat
        thread = msg.get("message_thread_id")
        if msg.get("is_topic_message") and isinstance(thread, int) and thread != 1:
            self._topics.setdefault(int(chat["id"]), set()).add(thread)

    def _message_json(self, sent: SentMessage) -> dict[str, Any]:
        chat = self._chats.get(sent.chat_id, {"id": sent.chat_id, "type": "private"})
        msg: dict[str, Any] = {
            "message_id": sent.message_id, "date": int(time.time()), "chat": chat,
            "from": self.me, "text": sent.text,
        }  # fmt: skip
        if sent.message_thread_id is not None:
            msg["message_thread_id"] = sent.message_thread_id
            msg["is_topic_message"] = bool(chat.get("is_forum"))
        elif sent.reply_to is not None and chat.get("type") == "supergroup":
            msg["message_thread_id"] = sent.reply_to  # a reply thread (no topics here)
        if sent.reply_to is not None:
            msg["reply_to_message"] = {
                "message_id": sent.reply_to,
                "date": msg["date"],
                "chat": chat,
            }
        if sent.reply_markup is not None:
            msg["reply_markup"] = sent.reply_markup
        return msg

    def _kick_delivery(self) -> None:
        idle = self._delivery is None or self._delivery.done()
        if self.webhook_url and self._pending and self._client is not None and idle:
            self._delivery = asyncio.get_running_loop().create_task(self._deliver())

    async def _deliver(self) -> None:
        """POST pending updates to the webhook in order; keep each until it gets a 2xx."""
        assert self._client is not None
        while self.webhook_url and self._pending and not self._closing and not self._paused:
            update = self._pending[0]
            headers = {}
            if self.webhook_secret:
                headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
            try:
                async with self._client.post(self.webhook_url, json=update, headers=headers) as r:
                    status = r.status
            except OSError:
                status = 0
            self.webhook_deliveries.append((update["update_id"], status))
            if 200 <= status < 300:
                if self._pending and self._pending[0] is update:
                    self._pending.pop(0)
            else:
                await asyncio.sleep(0.05)


def _inline_keyboard(raw: Any) -> dict[str, Any] | None:
    """A ``reply_markup`` checked as the Bot API checks an inline keyboard (None: none)."""
    if raw is None:
        return None
    rows = raw.get("inline_keyboard") if isinstance(raw, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise _ApiError(400, "Bad Request: can't parse inline keyboard button")
    for button in (b for row in rows for b in row):
        if not isinstance(button, dict) or not str(button.get("text") or "").strip():
            raise _ApiError(400, "Bad Request: text buttons are unallowed in the inline keyboard")
        data = button.get("callback_data")
        if data is not None and not 1 <= len(str(data).encode()) <= 64:
            raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
    return {"inline_keyboard": rows}


def _message_text(params: dict[str, Any], *, too_long: str) -> tuple[str, Any, str]:
    """A send's or an edit's ``(text as given, parse_mode, text as shown)``; Telegram
    words the too-long error differently for the two (``too_long``)."""
    raw, mode = str(params.get("text", "")), params.get("parse_mode")
    text = _parse(raw, mode)
    if not text.strip():
        raise _ApiError(400, "Bad Request: message text is empty")
    if utf16_len(text) > MAX_TEXT:
        raise _ApiError(400, f"Bad Request: {too_long}")
    return raw, mode, text


def _parse(raw: str, mode: Any) -> str:
    if mode is None:
        return raw
    if str(mode).upper() != "HTML":
        raise _ApiError(400, "Bad Request: unsupported parse_mode")
    try:
        return visible_text(raw)
    except HtmlParseError as err:
        raise _ApiError(400, f"Bad Request: can't parse entities: {err}") from None


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    if request.content_type == "application/json":
        data = await request.json()
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str | web.FileField)}


def _decode(raw: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            if key in _INT_FIELDS:
                params[key] = int(value)
            elif key in _JSON_FIELDS:
                params[key] = json.loads(value)
            else:
                params[key] = value
        except ValueError:
            params[key] = value
    return params


def _reply(status: int, payload: dict[str, Any]) -> web.Response:
    return web.json_response(payload, status=status)
