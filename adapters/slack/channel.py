"""The Slack channel's I/O shell: a slack-bolt ``AsyncApp`` in front, the Web API behind.

Ingress arrives over Socket Mode (default) or as signed HTTP events served by the
gateway's aiohttp app (:meth:`SlackChannel.http_routes`). An HTTP request is checked first
(:mod:`adapters.slack.http`: signature over the raw bytes, then the body's shape); bolt
then answers ``url_verification`` and acks. Listeners run before the ack
(``process_before_response``): an event is acknowledged only after the sink took it
(:mod:`adapters.slack.ingest` retries it meanwhile), so a crash or a Redis outage makes
Slack retry instead of losing the message (the gateway dedupes). Everything else is
:mod:`adapters.slack.convert` and :mod:`adapters.slack.markup`.

A payload fanbot does not act on (a reaction, a shortcut, ``app_rate_limited``…) is answered
200 and logged, never bolt's 404: Slack counts a non-2xx answer as a failed delivery and
disables the events of an app with too many. ``app_uninstalled`` and a bot ``tokens_revoked``
(:mod:`adapters.slack.lifecycle`) end the adapter's work for that workspace: one warning,
then its events are dropped and every send there fails as permanent (the outbox drops it);
other workspaces go on. It lasts until the process restarts (with a new token).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import convert, lifecycle, markup
from adapters.slack import files as slack_files
from adapters.slack import http as slack_http
from adapters.slack import parts as slack_parts
from adapters.slack.ingest import RetryingSink
from adapters.slack.retry import TRANSIENT_EXCEPTIONS, BoundedRateLimitRetryHandler, delivery_error
from bot import attachments as att
from bot.attachments import FileRef
from bot.config import AttachmentSettings, SlackSettings
from bot.errors import ConfigError, DeliveryError
from bot.logs import ThrottledLog
from bot.ports import InboundSink, OpenedThread, OutFile, PartLog
from bot.runs.naming import Icon
from bot.types import Inbound, Outbound, Platform, ThreadRef

log = logging.getLogger(__name__)

TYPING_TIMEOUT_SECONDS = 1.5
HTTP_WAIT_SECONDS = 2.0
"""How long an HTTP delivery waits for the sink: Slack gives up on an answer after 3 s."""
COMMAND_WAIT_SECONDS = 2.0
COMMAND_UNAVAILABLE = (
    f"{Icon.WARNING} I could not take this command just now (my state store is unavailable). "
    "Please try again in a minute."
)
_AUTH_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked"})


class SlackChannel:
    """A :class:`~bot.ports.ChannelAdapter` for one Slack workspace.

    Args:
        settings: The ``slack`` settings (tokens, mode, API URL, limits).
        chunker: Splits converted text into parts of at most a given length.
    """

    platform = Platform.SLACK.value

    def __init__(
        self,
        *,
        settings: SlackSettings,
        chunker: markup.Chunker = markup.split,
        attachments: AttachmentSettings | None = None,
    ) -> None:
        if settings.bot_token is None:
            raise ConfigError("FANBOT_SLACK__BOT_TOKEN is required for Slack")
        if settings.mode == "socket" and settings.app_token is None:
            raise ConfigError("FANBOT_SLACK__APP_TOKEN is required in Socket Mode")
        if settings.mode == "http" and settings.signing_secret is None:
            raise ConfigError("FANBOT_SLACK__SIGNING_SECRET is required in HTTP mode")
        self._settings = settings
        self._chunker = chunker
        self._limits = attachments or AttachmentSettings()
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None
        self._app: AsyncApp | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._sink: InboundSink | None = None
        self._holder: RetryingSink | None = None
        self._junk = ThrottledLog(log)
        self._gone: dict[str, str] = {}
        """Workspaces whose bot token Slack said is gone -> the event that said so."""
        self.identity: convert.BotIdentity | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, sink: InboundSink) -> None:
        """Check the token (``auth.test``), build the bolt app, connect Socket Mode."""
        self._sink = sink
        self._holder = RetryingSink(sink=sink)
        self._session = aiohttp.ClientSession()
        self._client = AsyncWebClient(
            token=_secret(self._settings.bot_token),
            base_url=self._settings.api_url,
            session=self._session,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(),
                BoundedRateLimitRetryHandler(max_wait=self._settings.rate_limit_wait_max_seconds),
            ],
        )
        try:
            self.identity = await self._whoami(self._client)
            self._app = self._build_app(self._client)
            if self._settings.mode == "socket":
                await self._connect_socket(self._app, self._client)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Close the socket and the HTTP session (idempotent)."""
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]
        holder, self._holder = self._holder, None
        if holder is not None:
            await holder.close()  # what it held stays unacked: Slack redelivers it
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        self._app = None
        self._client = None

    async def _whoami(self, client: AsyncWebClient) -> convert.BotIdentity:
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            if exc.response.get("error") in _AUTH_ERRORS:
                raise ConfigError("Slack rejected FANBOT_SLACK__BOT_TOKEN (auth.test)") from exc
            raise
        return convert.BotIdentity(
            user_id=self._settings.bot_user_id or str(auth.get("user_id", "")),
            bot_id=str(auth.get("bot_id") or ""),
            team_id=str(auth.get("team_id") or ""),
        )

    def _build_app(self, client: AsyncWebClient) -> AsyncApp:
        app = AsyncApp(
            name="fanbot",
            client=client,
            signing_secret=_secret(self._settings.signing_secret),
            process_before_response=True,
            logger=logging.getLogger("adapters.slack.bolt"),
            raise_error_for_unhandled_request=True,  # to _on_bolt_error: 200, not 404
        )
        app.use(_Readable(self._unreadable))
        app.event(re.compile(r".*"))(self._on_event)
        app.command(re.compile(r"^/.+"))(self._on_command)
        app.action(re.compile("^" + convert.ACTION_PREFIX))(self._on_action)
        app.error(self._on_bolt_error)
        return app

    async def _connect_socket(self, app: AsyncApp, client: AsyncWebClient) -> None:
        # Ask for the first URL ourselves: the SDK's connect() retries a bad app token
        # forever, while an operator needs a clear error at start.
        try:
            opened = await client.apps_connections_open(app_token=_secret(self._settings.app_token))
        except SlackApiError as exc:
            raise ConfigError(
                f"Slack refused FANBOT_SLACK__APP_TOKEN: {exc.response.get('error')}"
            ) from exc
        self._socket = _SocketHandler(
            app,
            refuse=self._unreadable,
            app_token=_secret(self._settings.app_token),
            web_client=client,
            ping_interval=self._settings.socket_ping_interval,
        )
        self._socket.client.wss_uri = str(opened["url"])
        await self._socket.connect_async()  # type: ignore[no-untyped-call]

    # -- ingress ---------------------------------------------------------------------------

    async def _on_event(self, body: dict[str, Any]) -> BoltResponse | None:
        lost = lifecycle.lost_workspace(body)
        if lost is not None:
            self._forget(lost)
            return None
        inbound = None
        if self.identity is not None:
            inbound = _converted(convert.event_to_inbound, body, self.identity)
        if inbound is None:
            log.debug("slack: ignored an %s (fanbot does not act on it)", lifecycle.kind_of(body))
            return None  # acked: nothing to hand over
        if self._holder is None or self._refused(inbound):
            return None
        inbound = await self._with_files(inbound, body)
        # Socket Mode holds the envelope until the sink took the message; HTTP must answer
        # within 3 s, so it answers 503 (Slack retries) while the holder keeps trying.
        wait = None if self._settings.mode == "socket" else HTTP_WAIT_SECONDS
        if await self._holder.deliver(inbound, wait=wait):
            return None
        return BoltResponse(status=503, body="not taken yet; retry")

    async def _with_files(self, inbound: Inbound, body: dict[str, Any]) -> Inbound:
        """Download the message's files when it may be for the bot (bounded, never raises)."""
        s = inbound.sender
        if s.is_self or s.is_bot or self._session is None:
            return inbound
        raw = body.get("event") or {}
        if not (inbound.mentioned or raw.get("thread_ts")):
            return inbound  # a top-level message not for the bot: its files are not ours
        refs = _converted_refs(body)
        if not refs:
            return inbound
        session, token = self._session, _secret(self._settings.bot_token)
        api_url, limit = self._settings.api_url, self._limits.max_bytes
        got = await att.download_selected(
            refs,
            limits=self._limits,
            download=lambda ref: slack_files.download(session, ref, token, api_url, limit),
        )
        return dataclasses.replace(inbound, attachments=got)

    async def _on_command(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
        inbound = None
        if self.identity is not None:
            me, name = self.identity, self._settings.slash_command
            inbound = _converted(convert.command_to_inbound, body, me, slash_command=name)
        if inbound is None or self._holder is None or self._refused(inbound):
            await ack()
            return
        # Slack never redelivers a slash command, and a late one would surprise its author:
        # one bounded try, and an honest answer when it failed.
        if await self._holder.try_once(inbound, timeout=COMMAND_WAIT_SECONDS):
            await ack()
        else:
            await ack(text=COMMAND_UNAVAILABLE)

    async def _on_action(self, ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
        """A button of ours pressed (Socket Mode or the HTTP interactivity endpoint): one
        bounded try, then the ack; the answer comes as an ephemeral or the edited request."""
        inbound = None
        if self.identity is not None:
            inbound = _converted(convert.action_to_inbound, body, self.identity)
        if inbound is not None and self._holder is not None and not self._refused(inbound):
            await self._holder.try_once(inbound, timeout=COMMAND_WAIT_SECONDS)
        await ack()

    async def _on_bolt_error(self, error: Exception, body: dict[str, Any]) -> BoltResponse:
        if isinstance(error, BoltUnhandledRequestError):
            return self._not_acted_on(body)
        # Reached only by a payload bolt's middleware cannot digest (the sink's failures are
        # handled in the listeners): one throttled line, no traceback. Socket Mode acks it,
        # since a retry would fail the same way; HTTP answers 400 (Slack retries 3 times).
        self._junk.warning(
            "bolt", "slack: dropped a payload bolt could not handle (%s: %.200s)",
            type(error).__name__, error,
        )  # fmt: skip
        return BoltResponse(status=200 if self._settings.mode == "socket" else 400, body="")

    def _unreadable(self, problem: str) -> BoltResponse:
        """A Socket Mode payload bolt cannot read (HTTP refused it before bolt): one line,
        and an ack, since a redelivery would fail the same way."""
        self._junk.warning("socket-shape", "slack: dropped a payload bolt cannot read: %s", problem)
        return BoltResponse(status=200 if self._settings.mode == "socket" else 400, body="")

    def _not_acted_on(self, body: dict[str, Any]) -> BoltResponse:
        """A signed, well-formed payload no listener of ours takes: 200 (Slack counts any
        other answer as a failed delivery), a warning for ``app_rate_limited``, else debug."""
        minute = lifecycle.rate_limited(body)
        if minute is not None:
            team = lifecycle.team_of(body) or "?"
            self._junk.warning(
                "rate-limited", "slack: Slack rate-limited this app's events for workspace "
                "%s from %s (app_rate_limited); events past the limit are not delivered",
                team, minute,
            )  # fmt: skip
        else:
            log.debug("slack: ignored a %s (fanbot does not act on it)", lifecycle.kind_of(body))
        return BoltResponse(status=200, body="")

    def _forget(self, lost: lifecycle.Lost) -> None:
        """Stop all work for a workspace whose bot token is gone (one line, the first time)."""
        if lost.team_id in self._gone:
            return
        self._gone[lost.team_id] = lost.event
        log.warning(
            "slack: %s for workspace %s: its events are dropped and nothing more is sent "
            "there until fanbot restarts with a valid token", lost.event, lost.team_id,
        )  # fmt: skip

    def _refused(self, inbound: Inbound) -> bool:
        return self._gone_for(inbound.thread) is not None

    def _gone_for(self, thread: ThreadRef) -> str | None:
        """The event that ended the work for ``thread``'s workspace, or ``None``."""
        if not self._gone:
            return None
        me = self.identity.team_id if self.identity is not None else ""
        return self._gone.get(thread.account or me)

    def http_routes(self) -> list[web.RouteDef]:
        """The Events API / slash-command endpoint for the gateway's aiohttp app.

        Empty in Socket Mode, so the gateway opens no HTTP port on Slack's behalf.
        """
        if self._settings.mode != "http":
            return []
        return [web.post(self._settings.http_path, self._handle_http)]

    async def _handle_http(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        rejected = slack_http.check(
            secret=_secret(self._settings.signing_secret),
            body=raw,
            headers=request.headers,
            now=time.time(),
        )
        if rejected is not None:
            # Unauthenticated junk can come in floods: a line a minute per kind, no traceback.
            self._junk.warning(
                f"http-{rejected.status}", "slack: refused an HTTP request with %d: %s",
                rejected.status, rejected.reason,
            )  # fmt: skip
            return web.json_response({"error": rejected.reason}, status=rejected.status)
        if self._app is None:
            return web.json_response({"error": "not started"}, status=503)
        try:
            bolt_request = AsyncBoltRequest(
                body=raw.decode(), query=request.query_string, headers=dict(request.headers)
            )
        except (ValueError, TypeError, AttributeError, LookupError) as exc:
            # A shape the checks above do not know of yet; still no 500 and no traceback.
            self._junk.warning(
                "http-bolt", "slack: refused an HTTP request bolt cannot read: %s", exc
            )
            return web.json_response({"error": "malformed body"}, status=400)
        return await to_aiohttp_response(await self._app.async_dispatch(bolt_request))

    # -- egress ----------------------------------------------------------------------------

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Post the parts of ``message`` not posted yet into its thread; return every ts.

        Public parts carry metadata naming their outbox key and index; a part in doubt is
        looked for in the thread before it is posted again, so none appears twice.
        """
        if message.callback and not message.ephemeral_to:
            return []  # a button press: the edited request is the answer
        if message.edit_of:  # an approval request's outcome: its buttons go
            await self._replace(message)
            return [message.edit_of]
        client = self._require_client(message.thread)
        texts = self._chunker(markup.to_mrkdwn(message.text), self._settings.max_message_chars)
        book = parts or PartLog(key=message.idempotency_key)
        if book.in_doubt and book.key and not message.ephemeral_to and book.todo(len(texts)):
            await self._find_posted(client, message, book)
        for index in book.todo(len(texts)):
            blocks = None
            if message.actions and index == len(texts) - 1:
                blocks = convert.action_blocks(texts[index], message.actions)
            posted = await self._post(client, message, texts[index], index, book, blocks)
            await book.record(index, posted)
        return book.ids(len(texts))

    async def _post(
        self,
        client: AsyncWebClient,
        message: Outbound,
        text: str,
        index: int,
        book: PartLog,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        channel, thread_ts = message.thread.chat, message.thread.thread or None
        try:
            if message.ephemeral_to:
                user = message.ephemeral_to
                resp = await client.chat_postEphemeral(
                    channel=channel, user=user, text=text, thread_ts=thread_ts
                )
                return str(resp.get("message_ts", ""))
            meta = slack_parts.metadata(book.key, index) if book.key else None
            resp = await client.chat_postMessage(
                channel=channel, text=text, thread_ts=thread_ts, metadata=meta, blocks=blocks
            )
            return str(resp["ts"])
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc, posted=len(book.posted)) from exc

    async def _find_posted(self, client: AsyncWebClient, message: Outbound, book: PartLog) -> None:
        """Record the parts Slack already shows for ``book.key`` (a send that died midway)."""
        try:
            found = await slack_parts.find_posted(
                client,
                channel=message.thread.chat,
                thread_ts=message.thread.thread or None,
                key=book.key,
                since=book.since,
            )
        except TRANSIENT_EXCEPTIONS as exc:
            error = delivery_error(exc)
            if not slack_parts.refused(exc):
                raise error from exc  # not now: the outbox retries later
            log.warning("slack: cannot look for parts already posted (%s); posting again", error)
            return
        for index, ts in sorted(found.items()):
            if index not in book.posted:
                await book.record(index, ts)

    async def open_thread(self, parent: ThreadRef, title: str) -> OpenedThread:
        """A new top-level message in ``parent``'s channel, whose thread the child gets;
        the link is its permalink (``chat.getPermalink``)."""
        client = self._require_client(parent)
        try:
            resp = await client.chat_postMessage(
                channel=parent.chat, text=markup.to_mrkdwn(f"{Icon.THREAD} {title}")
            )
            ts = str(resp["ts"])
            link = await client.chat_getPermalink(channel=parent.chat, message_ts=ts)
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc) from exc
        thread = dataclasses.replace(parent, thread=ts)
        return OpenedThread(thread=thread, link=str(link.get("permalink") or f"thread {ts}"))

    async def send_file(self, thread: ThreadRef, file: OutFile, *, key: str) -> str:
        """Upload ``file`` into the thread (``files_upload_v2``); returns the file id."""
        client = self._require_client(thread)
        try:
            return await slack_files.upload(
                client,
                channel=thread.chat,
                thread_ts=thread.thread or None,
                name=file.name,
                data=file.data,
            )
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc) from exc

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        """Replace a status message's text with ``chat.update`` (truncated to one part)."""
        client = self._require_client(thread)
        converted = markup.to_mrkdwn(text)
        limit = self._settings.max_message_chars
        if len(converted) > limit:
            converted = self._chunker(converted, limit - 2)[0] + "\n…"
        try:
            await client.chat_update(channel=thread.chat, ts=message_id, text=converted)
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc) from exc

    async def _replace(self, message: Outbound) -> None:
        """``chat.update`` of ``message.edit_of`` with new blocks (none of its buttons)."""
        client = self._require_client(message.thread)
        text = markup.to_mrkdwn(message.text)[:3000]
        try:
            await client.chat_update(
                channel=message.thread.chat,
                ts=message.edit_of or "",
                text=text,
                blocks=convert.action_blocks(text, message.actions),
            )
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc) from exc

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        """Remove a status message with ``chat.delete`` (a run that ended quietly)."""
        client = self._require_client(thread)
        try:
            await client.chat_delete(channel=thread.chat, ts=message_id)
        except TRANSIENT_EXCEPTIONS as exc:
            raise delivery_error(exc) from exc

    async def typing(self, thread: ThreadRef) -> None:
        """Show "is working…" in an assistant thread; quietly does nothing elsewhere."""
        if not self._settings.assistant_status or not thread.thread or self._client is None:
            return
        if self._gone_for(thread) is not None:
            return
        try:
            # Bounded: the gateway calls this before the event is acked (3 s budget), and
            # a rate-limited status is not worth waiting for.
            async with asyncio.timeout(TYPING_TIMEOUT_SECONDS):
                await self._client.assistant_threads_setStatus(
                    channel_id=thread.chat, thread_ts=thread.thread, status="is working…"
                )
        except TRANSIENT_EXCEPTIONS as exc:
            log.debug("assistant.threads.setStatus failed: %s", exc)

    def _require_client(self, thread: ThreadRef) -> AsyncWebClient:
        """The Web API client for a call into ``thread``; refused (permanent) for a
        workspace whose bot token is gone, so the outbox drops the message, not retries it."""
        gone = self._gone_for(thread)
        if gone is not None:
            raise DeliveryError(
                f"not sent: {gone} for Slack workspace {thread.account or 'of the bot'}",
                permanent=True,
            )
        if self._client is None:
            raise DeliveryError("the Slack channel is not started")
        return self._client


class _SocketHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, plus an ack and one line for a payload bolt cannot even
    build its request from (``team`` a number: it reads ``"id" in team``), which would
    otherwise escape to the socket client as a traceback and stay unacked."""

    def __init__(self, app: AsyncApp, *, refuse: Callable[[str], BoltResponse], **kw: Any):
        super().__init__(app, **kw)
        self._refuse = refuse

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        try:
            await super().handle(client, req)
        except (LookupError, TypeError, AttributeError, ValueError) as exc:
            self._refuse(f"{type(exc).__name__}: {exc}"[:200])
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))


class _Readable(AsyncMiddleware):
    """Bolt middleware: a body bolt's readers would fail on (:func:`adapters.slack.http.
    shape_problem`) goes to ``refuse``, before any listener or error handler reads it.

    A class, not a middleware function: bolt builds a function's arguments with the very
    readers that fail on such a body.
    """

    def __init__(self, refuse: Callable[[str], BoltResponse]) -> None:
        self._refuse = refuse

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],
    ) -> BoltResponse | None:
        problem = slack_http.shape_problem(req.body) if isinstance(req.body, dict) else None
        if problem is not None:
            return self._refuse(problem)
        return await next()


def _converted(
    conversion: Callable[..., Inbound | None], body: Any, *args: Any, **kw: Any
) -> Inbound | None:
    """Convert, or log and drop: Slack retries a failed event, and would fail the same way.

    Converters return ``None`` for anything malformed; an exception here is a converter bug,
    and letting it reach bolt would turn one bad payload into retries and an error per try.
    """
    try:
        return conversion(body, *args, **kw)
    except Exception:
        log.warning("slack: dropped an event that failed conversion: %.300r", body, exc_info=True)
        return None


def _converted_refs(body: Any) -> list[FileRef]:
    try:
        return slack_files.file_refs(body)
    except Exception:
        log.warning("slack: ignored the files of an event that failed conversion", exc_info=True)
        return []


def _secret(value: Any) -> str:
    return "" if value is None else str(value.get_secret_value())
