"""A protocol-level fake of Slack for the real ``slack_sdk`` / ``slack_bolt`` clients.

One aiohttp server on a free loopback port speaks three things:

- the **Web API** under :attr:`FakeSlack.api_url` (``auth.test``, ``chat.postMessage``,
  ``chat.update``, ``chat.delete``, ``chat.postEphemeral``, ``assistant.threads.setStatus``,
  ``apps.connections.open``, ``conversations.info|replies|history``, ``users.info``;
  message metadata kept and returned as Slack does), form, query or JSON
  arguments, bearer tokens checked, every call recorded, Slack's 40,000-character text
  limit enforced (``msg_too_long``), faults injectable (``429`` + ``Retry-After``, 5xx,
  ``ok: false``, optionally only for matching arguments);
- **Socket Mode**: ``apps.connections.open`` hands out a one-use ``ws://`` URL; the socket
  says ``hello``, carries the envelopes a test pushes, records acks, can ask the client to
  reconnect (``disconnect`` / ``refresh_requested``) and re-delivers an ``events_api``
  envelope that was not acked, as Slack does: on the next connection when its socket died,
  else once ``ack_timeout`` passed, with ``retry_attempt + 1`` and ``retry_reason``, at most
  ``len(retry_delays)`` times (Slack: at once, after 1 minute, after 5 minutes);
- **interactivity**: messages keep their Block Kit ``blocks`` (buttons checked as Slack
  checks them, ``chat.update`` replaces them); :meth:`FakeSlack.press` builds the
  ``block_actions`` payload of a button press, sent over Socket Mode
  (:meth:`FakeSlack.push_interactive`) or signed over HTTP as the ``payload`` form field;
- **signed HTTP events**: :meth:`FakeSlack.deliver_http` POSTs a body to the app with a
  valid, forged or stale ``v0`` signature; :meth:`FakeSlack.deliver_http_retrying` also
  retries a delivery that got no 2xx within ``ack_timeout``, as the Events API does.

:meth:`FakeSlack.pause` / :meth:`FakeSlack.resume` take the whole server off the network
(connection refused, sockets dropped) and back on the same port with its state kept.

Usage::

    async with FakeSlack() as slack:
        settings = slack.settings()              # SlackSettings pointing at the fake
        ...
        env = await slack.push_event(slack.app_mention(text="<@U0FANBOT> hi"))
        await slack.wait_ack(env)
        posted = await slack.wait_messages(1)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import aiohttp
from aiohttp import web
from pydantic import SecretStr

from bot.config import SlackSettings
from bot.testing import slack_wire as wire
from bot.testing.netutil import LOOPBACK, FakeServer, bind_loopback
from bot.testing.slack_files import SlackFiles
from bot.testing.slack_webapi import MAX_TEXT_CHARS, ApiCall, Fault, Posted, WebApi

__all__ = ["MAX_TEXT_CHARS", "ApiCall", "Envelope", "FakeSlack", "Fault", "HttpResult", "Posted"]


@dataclass(kw_only=True)
class Envelope:
    """A Socket Mode envelope sent to the app; ``ack`` is the app's reply once it came."""

    envelope_id: str
    body: dict[str, Any]
    connection: int
    ack: dict[str, Any] | None = None
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    redelivered: bool = False


@dataclass
class HttpResult:
    """What the app answered to a delivered HTTP event."""

    status: int
    text: str


@dataclass(kw_only=True)
class _Conn:
    index: int
    ws: web.WebSocketResponse
    retiring: bool = False


class FakeSlack(FakeServer):
    """The fake Slack server (start with ``async with`` or :meth:`start` / :meth:`stop`).

    Args:
        team_id: The workspace id (``auth.test`` and event payloads).
        bot_user_id: The bot's user id (mentions look like ``<@bot_user_id>``).
        bot_id: The bot's ``B…`` id carried by its own messages.
        bot_token: Accepted bearer token for Web API methods.
        app_token: Accepted token for ``apps.connections.open``.
        signing_secret: Secret used by :meth:`deliver_http` to sign requests.
        echo_bot_messages: Send the app's own posts back as ``message`` events (as Slack
            does when the app subscribes to ``message.*``).
        ack_timeout: Seconds Slack waits for an ack (Socket Mode) or a 2xx (HTTP) before
            it retries; ``None`` turns timed retries off.
        retry_delays: Delay before each retry after a timeout; Slack gives up after the last.
    """

    def __init__(
        self,
        *,
        team_id: str = "T0FANBOT",
        bot_user_id: str = "U0FANBOT",
        bot_id: str = "B0FANBOT",
        app_id: str = "A0FANBOT",
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-fake-app-token",
        signing_secret: str = "fake-signing-secret",
        echo_bot_messages: bool = False,
        ack_timeout: float | None = 3.0,
        retry_delays: Sequence[float] = (0.0, 60.0, 300.0),
    ) -> None:
        self.team_id, self.bot_user_id, self.bot_id, self.app_id = (
            team_id,
            bot_user_id,
            bot_id,
            app_id,
        )
        self.bot_token, self.app_token, self.signing_secret = bot_token, app_token, signing_secret
        self.echo_bot_messages = echo_bot_messages
        self.ack_timeout, self.retry_delays = ack_timeout, tuple(retry_delays)
        self.web = WebApi(
            team_id=team_id,
            bot_user_id=bot_user_id,
            bot_id=bot_id,
            bot_token=bot_token,
            app_token=app_token,
            socket_url=self._socket_url,
            on_post=self._echo if echo_bot_messages else None,
        )
        # The Web API's records, under the names tests read.
        self.calls, self.messages = self.web.calls, self.web.messages
        self.ephemerals, self.statuses = self.web.ephemerals, self.web.statuses
        self.missing_channels = self.web.missing_channels
        self.fail, self.calls_to, self.thread = self.web.fail, self.web.calls_to, self.web.thread
        self.files = SlackFiles(bot_token=bot_token, base_url=lambda: self.url)
        """Hosted files (:meth:`SlackFiles.host`) and the app's uploads."""
        self.web.extra_methods.update(self.files.methods())
        self.envelopes: list[Envelope] = []
        self.http_deliveries: list[HttpResult] = []
        """Every :meth:`deliver_http` answer, oldest first."""
        self.connections = 0
        self._conns: list[_Conn] = []
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner = None
        self._port = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_routes(self.files.routes())
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        sock = bind_loopback(port=self._port)
        self._port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner
        return self

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self._conns):
            await conn.ws.close()
        await self._close_port()

    async def pause(self) -> None:
        """Go off the network: drop every socket and close the port (connection refused).

        Posted messages, envelopes and injected faults are kept for :meth:`resume`.
        """
        for conn in list(self._conns):
            conn.retiring = True
            await conn.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        await self._close_port()

    async def resume(self) -> None:
        """Listen again on the same port (clients reconnect on their own)."""
        if self._runner is None:
            await self.start()

    @property
    def api_url(self) -> str:
        """Base URL for ``AsyncWebClient(base_url=...)`` / ``FANBOT_SLACK__API_URL``."""
        return f"{self.url}/api/"

    def settings(self, **overrides: Any) -> SlackSettings:
        """``SlackSettings`` pointing at this fake (Socket Mode unless overridden)."""
        values: dict[str, Any] = {
            "bot_token": SecretStr(self.bot_token),
            "app_token": SecretStr(self.app_token),
            "signing_secret": SecretStr(self.signing_secret),
            "api_url": self.api_url,
            "socket_ping_interval": 1.0,
        }
        values.update(overrides)
        return SlackSettings(**values)

    # -- Web API ---------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.StreamResponse:
        args = await _read_args(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        token = token or str(args.get("token", ""))
        args.pop("token", None)
        reply = self.web.handle(request.match_info["method"], args, token)
        async with self._changed:
            self._changed.notify_all()
        if reply.html is not None:
            return web.Response(
                status=reply.status,
                text=reply.html,
                content_type="text/html",
                headers=reply.headers,
            )
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    def _socket_url(self, ticket: str) -> str:
        return f"ws://{LOOPBACK}:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"

    async def wait_messages(self, count: int, *, timeout: float = 10.0) -> list[Posted]:
        """Wait until the app posted at least ``count`` (public) messages."""
        await self._wait(lambda: len(self.messages) >= count, timeout, f"{count} messages")
        return list(self.messages)

    # -- events ----------------------------------------------------------------------------

    def message(self, **kwargs: Any) -> dict[str, Any]:
        """A ``message`` event (see :func:`bot.testing.slack_wire.message_event`)."""
        return wire.message_event(**kwargs)

    def app_mention(self, **kwargs: Any) -> dict[str, Any]:
        """An ``app_mention`` event (see :func:`bot.testing.slack_wire.app_mention_event`)."""
        return wire.app_mention_event(**kwargs)

    def event_body(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """``event`` wrapped in this workspace's ``event_callback`` body."""
        return wire.event_callback(
            event, team_id=self.team_id, app_id=self.app_id, event_id=event_id
        )

    def command_body(self, *, text: str, **kwargs: Any) -> dict[str, str]:
        """A slash command's form fields (see :func:`bot.testing.slack_wire.slash_command`)."""
        return wire.slash_command(text=text, team_id=self.team_id, app_id=self.app_id, **kwargs)

    def press(self, posted: Posted, value: str, *, user: str = wire.DEFAULT_USER) -> dict[str, Any]:
        """The ``block_actions`` payload of ``user`` pressing the button whose ``value`` is
        ``value`` under ``posted`` (raises if it has none); send it with
        :meth:`push_interactive` or :meth:`deliver_http` (form field ``payload``)."""
        found = [b for b in posted.buttons() if b.get("value") == value]
        if not found:
            raise AssertionError(f"message {posted.ts} has no button with value {value!r}")
        message = posted.as_message(
            bot_user_id=self.bot_user_id, bot_id=self.bot_id, metadata=False
        )
        return wire.block_actions(
            message=message, channel=posted.channel, action=found[0], team_id=self.team_id,
            app_id=self.app_id, user=user,
        )  # fmt: skip

    async def push_interactive(self, payload: dict[str, Any], *, timeout: float = 10.0) -> Envelope:
        """Send an interactive payload (``block_actions``) as an ``interactive`` envelope."""
        return await self.push(wire.envelope("interactive", payload), timeout=timeout)

    def _echo(self, posted: Posted) -> None:
        if self._live() is None:
            return
        event = wire.message_event(
            text=posted.text,
            user=self.bot_user_id,
            channel=posted.channel,
            ts=posted.ts,
            thread_ts=posted.thread_ts,
            bot_id=self.bot_id,
        )
        self._spawn(self.push_event(event))

    # -- Socket Mode -----------------------------------------------------------------------

    async def wait_connected(self, count: int = 1, *, timeout: float = 10.0) -> None:
        """Wait until ``count`` socket connections have been opened in total and one is live."""
        await self._wait(
            lambda: self.connections >= count and self._live() is not None,
            timeout,
            f"socket connection #{count}",
        )

    async def push_event(
        self,
        event: dict[str, Any],
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float = 10.0,
    ) -> Envelope:
        """Send ``event`` to the app as an ``events_api`` envelope."""
        body = wire.envelope(
            "events_api",
            self.event_body(event, event_id=event_id),
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
        )
        return await self.push(body, timeout=timeout)

    async def push_command(self, *, text: str, timeout: float = 10.0, **kwargs: Any) -> Envelope:
        """Send a slash command to the app as a ``slash_commands`` envelope."""
        body = wire.envelope("slash_commands", self.command_body(text=text, **kwargs))
        return await self.push(body, timeout=timeout)

    async def push(self, body: dict[str, Any], *, timeout: float = 10.0) -> Envelope:
        """Send a raw envelope on the live connection (waiting for one if needed)."""
        await self._wait(lambda: self._live() is not None, timeout, "a live socket")
        conn = self._live()
        assert conn is not None
        env = Envelope(envelope_id=str(body["envelope_id"]), body=body, connection=conn.index)
        self.envelopes.append(env)
        await conn.ws.send_str(json.dumps(body))
        if body.get("type") == "events_api" and self.ack_timeout is not None:
            self._spawn(self._retry_unacked(env, self.ack_timeout))
        return env

    async def redeliver(self, env: Envelope, *, reason: str = "timeout") -> Envelope:
        """Send ``env`` again with ``retry_attempt + 1`` and a new envelope id (a Slack retry)."""
        body = json.loads(json.dumps(env.body))
        body["envelope_id"] = wire.envelope("events_api", {})["envelope_id"]
        body["retry_attempt"] = int(body.get("retry_attempt", 0)) + 1
        body["retry_reason"] = reason
        return await self.push(body)

    async def wait_ack(self, env: Envelope, *, timeout: float = 10.0) -> dict[str, Any]:
        """Wait for the app's ack of ``env`` and return it."""
        await asyncio.wait_for(env.acked.wait(), timeout)
        assert env.ack is not None
        return env.ack

    async def disconnect(self, reason: str = "refresh_requested", *, grace: float = 10.0) -> None:
        """Ask the app to reconnect, as Slack does before it recycles a socket.

        The current socket receives no new envelopes; it is closed once the app opened a
        new one (or after ``grace`` seconds).
        """
        conn = self._live()
        if conn is None:
            raise RuntimeError("no live socket to disconnect")
        conn.retiring = True
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-slack"}}
        await conn.ws.send_str(json.dumps(message))
        self._spawn(self._retire(conn, grace))

    async def drop(self) -> None:
        """Close the live socket abruptly (the client must notice and reconnect)."""
        conn = self._live()
        if conn is not None:
            conn.retiring = True
            await conn.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)

    async def _retire(self, conn: _Conn, grace: float) -> None:
        with contextlib.suppress(TimeoutError):
            await self._wait(lambda: self._live() is not None, grace, "a new socket")
        await conn.ws.close()

    def _live(self) -> _Conn | None:
        for conn in reversed(self._conns):
            if not conn.retiring and not conn.ws.closed:
                return conn
        return None

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if not self.web.use_ticket(ticket):
            return web.Response(status=401, text="invalid or used ticket")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        conn = _Conn(index=self.connections, ws=ws)
        self._conns.append(conn)
        hello = {"type": "hello", "num_connections": len(self._conns)}
        hello |= {"debug_info": {"host": "fake-slack"}, "connection_info": {"app_id": self.app_id}}
        await ws.send_str(json.dumps(hello))
        async with self._changed:
            self._changed.notify_all()
        self._redeliver_unacked()
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    await self._on_client_message(msg.data)
        finally:
            self._conns.remove(conn)
            self._redeliver_unacked()
            async with self._changed:
                self._changed.notify_all()
        return ws

    def _redeliver_unacked(self) -> None:
        # Slack re-sends an events_api envelope whose socket died before the ack.
        live = {c.index for c in self._conns if not c.ws.closed}
        for env in list(self.envelopes):
            dead = env.connection not in live and env.body.get("type") == "events_api"
            if dead and env.ack is None and not env.redelivered:
                env.redelivered = True
                self._spawn(self._redeliver_quietly(env))

    async def _retry_unacked(self, env: Envelope, ack_timeout: float) -> None:
        # Slack's timed retry: no ack within the timeout, so the event goes out again.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(env.acked.wait(), ack_timeout)
            return
        attempt = int(env.body.get("retry_attempt", 0))
        if attempt >= len(self.retry_delays):
            return  # Slack gives up on the event
        await asyncio.sleep(self.retry_delays[attempt])
        if env.ack is None and not env.redelivered:
            env.redelivered = True
            await self._redeliver_quietly(env, reason="timeout")

    async def _redeliver_quietly(self, env: Envelope, *, reason: str = "timeout") -> None:
        with contextlib.suppress(TimeoutError):
            await self.redeliver(env, reason=reason)

    async def _on_client_message(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        for env in self.envelopes:
            if env.envelope_id == message.get("envelope_id") and env.ack is None:
                env.ack = message
                env.acked.set()
        async with self._changed:
            self._changed.notify_all()

    # -- HTTP events -----------------------------------------------------------------------

    def sign(self, body: str | bytes, *, timestamp: int | None = None) -> dict[str, str]:
        """Valid ``v0`` signature headers for ``body`` with this fake's signing secret."""
        return wire.sign(body, secret=self.signing_secret, timestamp=timestamp)

    async def deliver_http(
        self,
        url: str,
        body: dict[str, Any] | str,
        *,
        form: bool = False,
        timestamp: int | None = None,
        secret: str | None = None,
        signature: str | None = None,
        retry_num: int | None = None,
        retry_reason: str = "timeout",
        timeout: float | None = None,
    ) -> HttpResult:
        """POST ``body`` to the app like Slack's Events API / slash commands would.

        Args:
            url: The app's endpoint.
            body: A dict (JSON, or form fields with ``form=True``) or a raw string.
            form: Send ``application/x-www-form-urlencoded`` (slash commands).
            timestamp: Signature timestamp (default now; an old one makes it stale).
            secret: Sign with this secret instead (a forged signature).
            signature: Send this ``X-Slack-Signature`` verbatim.
            retry_num: Add ``X-Slack-Retry-Num`` (a Slack retry) and ``retry_reason``.
            timeout: Give up waiting for the answer after this many seconds (status 0).
        """
        if isinstance(body, str):
            raw, ctype = body, "application/json"
        elif form:
            raw = urllib.parse.urlencode(body)
            ctype = "application/x-www-form-urlencoded"
        else:
            raw, ctype = json.dumps(body), "application/json"
        headers = wire.sign(raw, secret=secret or self.signing_secret, timestamp=timestamp)
        if signature is not None:
            headers["X-Slack-Signature"] = signature
        headers["Content-Type"] = ctype
        if retry_num is not None:
            headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
        limit = aiohttp.ClientTimeout(total=timeout)
        try:
            async with (
                aiohttp.ClientSession(timeout=limit) as session,
                session.post(url, data=raw.encode(), headers=headers) as resp,
            ):
                result = HttpResult(status=resp.status, text=await resp.text())
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            result = HttpResult(status=0, text=f"{type(exc).__name__}: {exc}")
        self.http_deliveries.append(result)
        return result

    async def deliver_http_retrying(
        self, url: str, body: dict[str, Any] | str, *, form: bool = False
    ) -> list[HttpResult]:
        """Deliver ``body`` as the Events API does: retry until a 2xx or out of retries.

        An answer that is not 2xx, or none within ``ack_timeout``, is retried after each of
        ``retry_delays`` with ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason`` (and a fresh
        signature). Returns every attempt's result (status 0: no answer in time).
        """
        results: list[HttpResult] = []
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
            reason = "http_timeout" if results and results[-1].status == 0 else "http_error"
            result = await self.deliver_http(
                url, body, form=form, timeout=self.ack_timeout,
                retry_num=attempt or None, retry_reason=reason,
            )  # fmt: skip
            results.append(result)
            if 200 <= result.status < 300:
                break
        return results

    # -- helpers ---------------------------------------------------------------------------

    async def _wait(self, ready: Any, timeout: float, what: str) -> None:
        async def waiter() -> None:
            async with self._changed:
                await self._changed.wait_for(ready)

        try:
            await asyncio.wait_for(waiter(), timeout)
        except TimeoutError:
            raise TimeoutError(f"fake Slack: timed out waiting for {what}") from None

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _read_args(request: web.Request) -> dict[str, Any]:
    args: dict[str, Any] = dict(request.query)
    if request.method != "POST" or not request.can_read_body:
        return args
    if request.content_type == "application/json":
        with contextlib.suppress(ValueError):
            body = await request.json()
            if isinstance(body, dict):
                args.update(body)
        return args
    args.update(dict(await request.post()))
    return args
