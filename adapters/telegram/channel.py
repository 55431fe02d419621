"""The Telegram channel: python-telegram-bot's ``Application`` as a fanbot ChannelAdapter.

Ingress is long polling (:mod:`adapters.telegram.polling`, which moves the offset past an
update only once the sink took it) unless a webhook URL is configured; then
:meth:`TelegramChannel.http_routes` gives the gateway a route that checks Telegram's
secret-token header and hands each update to the sink before answering 200, so a failed
sink (a 503) makes Telegram redeliver. Either way the gateway dedupes a redelivery.
Egress renders markdown to Telegram HTML, splits it under 4096 UTF-16 units and maps PTB
errors to :class:`~bot.errors.DeliveryError`. PTB's ``Application`` is used for its bot
only: its ``Updater`` would confirm an update before the sink took it.

Restart semantics (polling): :meth:`TelegramChannel.stop` calls ``getUpdates`` once more
with the offset of the first update not taken, which confirms exactly the ones taken, so
they are not fetched again after a restart and the others are.

Secrets: the Bot API puts the token in every URL, and httpx logs each request URL at INFO
(PTB logs its base URL at DEBUG). While started, the channel redacts its token in those
loggers' records, so no logging set-up of the host process can write it out; errors it
raises carry no token either (their text ends up in logs and in the dead-letter stream).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dtm
import hmac
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar
from urllib.parse import urlparse

from aiohttp import web
from telegram import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    ReplyParameters,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application

from adapters.telegram import files as tg_files
from adapters.telegram.convert import (
    COMMANDS,
    REPLY_THREAD,
    BotIdentity,
    destination,
    file_refs,
    inline_keyboard,
    is_supergroup,
    message_link,
    reply_root,
    to_inbound,
    topic_link,
    unowned_callback,
)
from adapters.telegram.markup import Part, Splitter, render_parts
from adapters.telegram.polling import Poller
from bot import attachments as att
from bot.config import AttachmentSettings
from bot.errors import DeliveryError
from bot.logs import RedactSecrets, ThrottledLog
from bot.ports import InboundSink, OpenedThread, OutFile, PartLog
from bot.runs.naming import Icon
from bot.supervise.aio import cancel_all
from bot.text import jsonsafe
from bot.types import Inbound, Outbound, ThreadRef

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
CALLBACK_TEXT_MAX = 200  # the Bot API's limit for answerCallbackQuery's text
NOT_OURS = "This button is no longer active."
"""The answer to a press of a button fanbot does not own (docs/guides/telegram.md)."""
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
# Loggers that write request URLs (and so the token): httpx per request, PTB's bots once.
_URL_LOGGERS = (
    "httpx",
    "telegram.Bot",
    "telegram.ext.ExtBot",
    __name__,
    "adapters.telegram.polling",
)
T = TypeVar("T")


class TelegramChannel:
    """One bot account. Construct with :func:`adapters.telegram.build`.

    Args:
        token: Bot token.
        api_url: Bot API base URL; PTB appends the token (``{token}`` placeholders work too).
        file_url: Bot API file base URL.
        webhook_url: Public URL for webhook mode; ``None`` means long polling.
        webhook_secret: Secret Telegram echoes in ``X-Telegram-Bot-Api-Secret-Token``.
        poll_timeout: Long-polling timeout in seconds.
        splitter: Markdown chunker ``(text, limit) -> parts`` measuring UTF-16 units.
        commands: ``(name, description)`` pairs registered with ``setMyCommands``.
        attachments: Bounds on the files taken from a message.
    """

    platform = "telegram"

    def __init__(
        self,
        *,
        token: str,
        api_url: str,
        file_url: str,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
        poll_timeout: float = 30.0,
        splitter: Splitter | None = None,
        commands: Collection[tuple[str, str]] = COMMANDS,
        attachments: AttachmentSettings | None = None,
    ) -> None:
        self._token, self._api_url, self._file_url = token, api_url, file_url
        self._webhook_url, self._webhook_secret = webhook_url, webhook_secret
        self._poll_timeout = poll_timeout
        self._splitter = splitter
        self._commands = tuple(commands)
        self._limits = attachments or AttachmentSettings()
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._me: BotIdentity | None = None
        self._sink: InboundSink | None = None
        self._poller: Poller | None = None
        self._polling: asyncio.Task[None] | None = None
        self._junk = ThrottledLog(log)
        self._redact = RedactSecrets([token])

    @property
    def me(self) -> BotIdentity:
        """The bot's identity (known after :meth:`start`)."""
        if self._me is None:
            raise RuntimeError("TelegramChannel is not started")
        return self._me

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, sink: InboundSink) -> None:
        for name in _URL_LOGGERS:
            logging.getLogger(name).addFilter(self._redact)
        app = (
            Application.builder()
            .token(self._token)
            .base_url(self._api_url)
            .base_file_url(self._file_url)
            .updater(None)  # see the module docstring: we poll ourselves
            .build()
        )
        await app.initialize()  # getMe
        self._app, self._sink = app, sink
        self._me = BotIdentity(id=app.bot.id, username=app.bot.username or "")
        await app.bot.set_my_commands([BotCommand(n, d) for n, d in self._commands])
        if self._webhook_url:
            await app.bot.set_webhook(
                self._webhook_url,
                secret_token=self._webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
            )
        else:
            await app.bot.delete_webhook()  # getUpdates is refused while a webhook is set
            self._start_polling(app)
        log.info("telegram: @%s started (%s)", self._me.username, self.mode)

    def _start_polling(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        self._poller = Poller(
            bot=app.bot,
            deliver=self._deliver,
            timeout=self._poll_timeout,
            allowed_updates=ALLOWED_UPDATES,
        )
        self._polling = asyncio.create_task(self._poller.run(), name="telegram-polling")

    async def stop(self) -> None:
        polling, self._polling = self._polling, None
        if polling is not None:
            await cancel_all([polling])
        if self._poller is not None and self._app is not None:
            await self._poller.confirm()  # see the module docstring
        self._poller = None
        app, self._app = self._app, None
        if app is not None:
            await app.shutdown()
        for name in _URL_LOGGERS:
            logging.getLogger(name).removeFilter(self._redact)

    @property
    def mode(self) -> str:
        return "webhook" if self._webhook_url else "polling"

    def http_routes(self) -> list[web.RouteDef]:
        """The webhook route for the gateway's HTTP server (none in polling mode)."""
        if not self._webhook_url:
            return []
        path = urlparse(self._webhook_url).path or "/telegram/webhook"
        return [web.post(path, self._on_webhook)]

    # -- ingress ---------------------------------------------------------------------------
    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "")
        expected = self._webhook_secret or ""
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            self._junk.warning("403", "telegram: refused a webhook call without the secret")
            return web.Response(status=403, text="forbidden")
        data = _update_of(await request.read())
        if data is None:
            # 400, not 200: a body that is not an update did not come from Telegram.
            self._junk.warning("400", "telegram: refused a webhook body that is not an update")
            return web.Response(status=400, text="malformed update")
        if self._me is None or self._sink is None:
            return web.Response(status=503, text="not started")
        try:
            await self._deliver(data)
        except Exception as exc:  # not taken: Telegram redelivers anything but a 2xx
            self._junk.warning(
                "sink", "telegram: the gateway did not take update %s (%s: %s); answering 503",
                data["update_id"], type(exc).__name__, exc,
            )  # fmt: skip
            return web.Response(status=503, text="not taken; retry")
        return web.Response(status=200)

    async def _deliver(self, data: dict[str, Any]) -> None:
        stale = unowned_callback(data)
        if stale is not None:
            # Not one of our buttons: answered, so the client stops its spinner, and dropped.
            await self._answer_unowned(stale)
            return
        try:
            inbound = to_inbound(data, me=self.me, commands=[n for n, _ in self._commands])
        except Exception:
            # A converter bug, not a sink failure: answering 500 would make Telegram
            # redeliver this update (and hold back the ones after it) forever.
            log.warning(
                "telegram: dropped an update that failed conversion: %.300r", data, exc_info=True
            )
            return
        if inbound is not None and self._sink is not None:
            await self._sink(await self._with_files(inbound, data))

    async def _with_files(self, inbound: Inbound, data: dict[str, Any]) -> Inbound:
        """Download the message's files when it may be for the bot (bounded, never raises)."""
        s = inbound.sender
        if s.is_self or s.is_bot or inbound.is_edit:
            return inbound
        if not (inbound.mentioned or inbound.thread.thread):
            return inbound  # a group message not for the bot: its files are not ours
        try:
            refs = file_refs(data)
        except Exception:
            log.warning("telegram: ignored the files of an update", exc_info=True)
            return inbound
        if not refs:
            return inbound
        bot, limit = self._bot(), self._limits.max_bytes
        got = await att.download_selected(
            refs, limits=self._limits, download=lambda ref: tg_files.download(bot, ref, limit)
        )
        return dataclasses.replace(inbound, attachments=got)

    # -- egress ----------------------------------------------------------------------------
    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Post the parts of ``message`` not posted yet; return every part's message id.

        At least once: the Bot API lets a bot read nothing back, so a part in doubt (posted,
        then the gateway died before recording it) is posted again.
        """
        if message.callback:
            await self._answer(message)
            return []
        if message.edit_of:  # an edit without a keyboard removes the buttons
            await self.edit(message.thread, message.edit_of, message.text)
            return [message.edit_of]
        chat_id, topic = _destination(message.thread)
        root = reply_root(message.thread)
        rendered = render_parts(message.text, splitter=self._splitter)
        book = parts or PartLog(key=message.idempotency_key)
        markup = _keyboard(message)
        for index in book.todo(len(rendered)):
            last = markup if index == len(rendered) - 1 else None
            posted = await self._post(chat_id, topic, rendered[index], last, reply_to=root)
            await book.record(index, posted)
        return book.ids(len(rendered))

    async def _answer(self, message: Outbound) -> None:
        """Answer a button press (``answerCallbackQuery``): an alert for a refusal."""
        try:
            await self._bot().answer_callback_query(
                message.callback, text=message.text.replace("`", "")[:CALLBACK_TEXT_MAX],
                show_alert=message.ephemeral_to is not None,
            )  # fmt: skip
        except TelegramError as err:
            if isinstance(err, BadRequest) and "query is too old" in err.message.lower():
                return  # nobody waits for it any more: nothing to retry
            raise self._delivery_error(err) from err

    async def _answer_unowned(self, query_id: str) -> None:
        """Best effort: a redelivered press was answered already ("query is too old")."""
        try:
            await self._bot().answer_callback_query(query_id, text=NOT_OURS)
        except (TelegramError, DeliveryError) as err:
            self._junk.warning("unowned", "telegram: could not answer a button press: %s", err)

    async def open_thread(self, parent: ThreadRef, title: str) -> OpenedThread:
        """A new forum topic (``createForumTopic``) in ``parent``'s chat.

        Raises a permanent :class:`DeliveryError` where the chat is no forum or the bot may
        not manage topics (a reply thread in such a chat is not supported yet).
        """
        chat_id, _ = _destination(parent)
        try:
            topic = await self._bot().create_forum_topic(chat_id, title[:128])
        except BadRequest as err:
            if "not a forum" not in err.message.lower() or not is_supergroup(chat_id):
                raise self._delivery_error(err) from err
            return await self._open_reply_thread(parent, chat_id, title)
        except TelegramError as err:
            raise self._delivery_error(err) from err
        thread_id = int(topic.message_thread_id)
        thread = dataclasses.replace(parent, thread=str(thread_id))
        return OpenedThread(thread=thread, link=topic_link(chat_id, thread_id, name=title))

    async def _open_reply_thread(self, parent: ThreadRef, chat_id: int, title: str) -> OpenedThread:
        """A supergroup without topics: a message of the bot's whose replies are the thread."""
        part = render_parts(f"{Icon.THREAD} {title}", splitter=self._splitter)[0]
        root = await self._post(chat_id, None, part, None)
        thread = dataclasses.replace(parent, thread=f"{REPLY_THREAD}{root}")
        return OpenedThread(thread=thread, link=message_link(chat_id, int(root), name=title))

    async def send_file(self, thread: ThreadRef, file: OutFile, *, key: str) -> str:
        """Post ``file`` with ``sendDocument`` into the topic; returns its message id."""
        chat_id, topic = _destination(thread)
        try:
            root = reply_root(thread)
            reply = ReplyParameters(root, allow_sending_without_reply=True) if root else None
            sent = await self._bot().send_document(
                chat_id, document=file.data, filename=file.name, message_thread_id=topic,
                reply_parameters=reply,
            )  # fmt: skip
        except TelegramError as err:
            raise self._delivery_error(err) from err
        return str(sent.message_id)

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        chat_id, _ = _destination(thread)
        parts = render_parts(text, splitter=self._splitter)
        if not parts:
            return
        bot = self._bot()

        async def attempt(part_text: str, mode: str | None) -> object:
            return await bot.edit_message_text(
                part_text, chat_id=chat_id, message_id=int(message_id), parse_mode=mode,
                link_preview_options=_NO_PREVIEW,
            )  # fmt: skip

        try:
            await _plain_fallback(attempt, parts[0])  # status lines: the first part is enough
        except TelegramError as err:
            if isinstance(err, BadRequest) and "not modified" in err.message.lower():
                return
            raise self._delivery_error(err) from err

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        """Remove a status message (a run that ended quietly); one already gone is fine."""
        chat_id, _ = _destination(thread)
        try:
            await self._bot().delete_message(chat_id, int(message_id))
        except TelegramError as err:
            if isinstance(err, BadRequest) and "not found" in err.message.lower():
                return
            raise self._delivery_error(err) from err

    async def typing(self, thread: ThreadRef) -> None:
        """Best effort: a failed typing indicator is logged, never raised."""
        chat_id, topic = _destination(thread)
        try:
            await self._bot().send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=topic)
        except TelegramError as err:
            log.warning("telegram: typing indicator failed: %s", err)

    async def _post(
        self,
        chat_id: int,
        topic: int | None,
        part: Part,
        markup: InlineKeyboardMarkup | None,
        *,
        reply_to: int | None = None,
    ) -> str:
        bot = self._bot()
        # Into a reply thread: answer its root (still posted if the root was deleted).
        reply = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None

        async def attempt(text: str, mode: str | None) -> Any:
            return await bot.send_message(
                chat_id, text, parse_mode=mode, message_thread_id=topic,
                link_preview_options=_NO_PREVIEW, reply_markup=markup, reply_parameters=reply,
            )  # fmt: skip

        try:
            sent = await _plain_fallback(attempt, part)
        except TelegramError as err:
            raise self._delivery_error(err) from err
        return str(sent.message_id)

    def _delivery_error(self, err: TelegramError) -> DeliveryError:
        error = _delivery_error(err)
        message = self._redact.redact(str(error))
        if message == str(error):
            return error
        return DeliveryError(message, retry_after=error.retry_after, permanent=error.permanent)

    def _bot(self) -> Any:
        if self._app is None:
            raise DeliveryError("telegram channel is not started")
        return self._app.bot


async def _plain_fallback(attempt: Callable[[str, str | None], Awaitable[T]], part: Part) -> T:
    """Send as HTML; if Telegram cannot parse it, send the markdown source as plain text."""
    try:
        return await attempt(part.html, ParseMode.HTML)
    except BadRequest as err:
        if "can't parse entities" not in err.message.lower():
            raise
        log.warning("telegram: HTML rejected (%s); sending as plain text", err.message)
        return await attempt(part.source, None)


def _keyboard(message: Outbound) -> InlineKeyboardMarkup | None:
    data = inline_keyboard(message.actions)
    if data is None:
        return None
    rows = [[InlineKeyboardButton(b["text"], callback_data=b["callback_data"]) for b in row]
            for row in data["inline_keyboard"]]  # fmt: skip
    return InlineKeyboardMarkup(rows)


def _update_of(body: bytes) -> dict[str, Any] | None:
    """The update in a webhook body, or ``None`` (not UTF-8 JSON, too deep, no update id)."""
    try:
        data = jsonsafe.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
        return None
    return data


def _destination(thread: ThreadRef) -> tuple[int, int | None]:
    try:
        return destination(thread)
    except ValueError as err:
        raise DeliveryError(f"not a Telegram thread: {thread}", permanent=True) from err


def _delivery_error(err: TelegramError) -> DeliveryError:
    if isinstance(err, RetryAfter):
        wait: Any = err.retry_after
        seconds = wait.total_seconds() if isinstance(wait, dtm.timedelta) else float(wait)
        return DeliveryError(f"telegram flood control: {err}", retry_after=seconds)
    permanent = isinstance(err, BadRequest | Forbidden | InvalidToken | ChatMigrated)
    return DeliveryError(f"telegram: {type(err).__name__}: {err}", permanent=permanent)
