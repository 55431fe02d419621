"""The Matrix I/O shell: a nio ``AsyncClient``, its sync loop and sends.

Conversions live in :mod:`adapters.matrix.convert` and :mod:`adapters.matrix.markup`; this
module only moves events between the homeserver and the gateway. The sync token is saved
only after every event of the sync was taken by the sink, so a restart continues where it
stopped; if the sink fails (Redis down), the token stays and the same batch is fetched
again after a back-off (events taken before the failure come back too; the gateway dedupes
them by event id). An event that fails conversion is dropped with a warning instead: it
would fail again on every retry and hold up the room. The very first start skips the room
history instead of answering it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any

from aiohttp import ClientError, web
from nio import (
    AsyncClient,
    EncryptionError,
    LocalProtocolError,
    MatrixRoom,
    MegolmEvent,
    RoomGetEventResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SendRetryError,
    SyncResponse,
)

from adapters.matrix import convert
from adapters.matrix import files as mx_files
from adapters.matrix.login import login, make_client
from adapters.matrix.markup import Chunker, render, render_chunks
from adapters.matrix.state import SessionFile, SessionState
from bot import attachments as att
from bot.config import AttachmentSettings, MatrixSettings
from bot.errors import DeliveryError
from bot.logs import ThrottledLog
from bot.ports import InboundSink, OpenedThread, OutFile, PartLog
from bot.redis.url import public_url
from bot.runs.naming import Icon
from bot.supervise.aio import cancel_all
from bot.supervise.backoff import Backoff
from bot.text.chunking import split_markdown
from bot.text.network import unreachable_reason
from bot.types import Inbound, Outbound, OutboundKind, Platform, ThreadRef

log = logging.getLogger(__name__)

FIRST_SYNC_FILTER = {"room": {"timeline": {"limit": 1}}}
SYNC_FILTER = {"room": {"timeline": {"limit": 50}}}
TYPING_TIMEOUT_MS = 15_000


class SinkRefused(Exception):
    """The sink did not take an event; the sync that brought it must be redone."""


class MatrixChannel:
    """One Matrix account served through the ``ChannelAdapter`` port.

    Args:
        settings: The ``matrix`` section of the settings.
        store_path: Directory for ``session.json`` and, with encryption, nio's key store.
        chunker: ``(markdown, *, limit) -> parts``; :func:`bot.text.chunking.split_markdown` by
            default (keeps code fences balanced across parts).
    """

    platform = Platform.MATRIX.value

    def __init__(
        self,
        *,
        settings: MatrixSettings,
        store_path: Path,
        chunker: Chunker | None = None,
        attachments: AttachmentSettings | None = None,
    ) -> None:
        self.settings = settings
        self.attachments = attachments or AttachmentSettings()
        self.store_path = Path(store_path)
        self.chunker: Chunker = chunker or split_markdown
        self._file = SessionFile(self.store_path)
        self._client: AsyncClient | None = None
        self._session: SessionState | None = None
        self._sink: InboundSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._display_name = ""
        self._latest: dict[tuple[str, str], str] = {}
        self._seen_invites: set[str] = set()
        self._log = ThrottledLog(log, interval=30.0)

    @property
    def user_id(self) -> str:
        return self._session.user_id if self._session else (self.settings.user_id or "")

    @property
    def device_id(self) -> str:
        return self._session.device_id if self._session else ""

    async def start(self, sink: InboundSink) -> None:
        """Log in, run one sync (history skipped on the very first start), start syncing."""
        self._sink = sink
        client = self._client = make_client(self.settings, self.store_path)
        try:
            self._session = await login(client, self.settings, self._file)
            self._file.save(self._session)
            profile = await client.get_displayname(self._session.user_id)
            self._display_name = getattr(profile, "displayname", None) or ""
            first = not self._session.next_batch
            try:
                await self._sync_once(deliver=not first, full_state=True, timeout=0)
            except SinkRefused as exc:
                self._refused(exc, 0.0)  # the sync loop redoes this batch
        except BaseException:
            await client.close()
            self._client = None
            raise
        self._task = asyncio.create_task(self._sync_forever(), name="matrix-sync")

    async def stop(self) -> None:
        """Stop syncing and close the HTTP session."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True  # a cancel swallowed by the HTTP stack still ends the loop
            await cancel_all([task])
        if self._client is not None:
            await self._client.close()
            self._client = None
            await asyncio.sleep(0)  # let the closed transports release their sockets now

    async def _sync_forever(self) -> None:
        backoff = Backoff(base=1.0, cap=60.0)
        self._stopping = False
        while not self._stopping:
            try:
                await self._sync_once(
                    deliver=True, full_state=False, timeout=self.settings.sync_timeout_ms
                )
                backoff.reset()
                continue
            except SinkRefused as exc:
                wait = backoff.next()
                self._refused(exc, wait)
            except DeliveryError as exc:
                wait = exc.retry_after or backoff.next()
                log.warning("matrix: sync failed (%s); retrying in %.1fs", exc, wait)
            except (ClientError, TimeoutError) as exc:
                wait = backoff.next()
                log.warning(
                    "matrix: cannot reach %s (%s); retrying in %.0fs",
                    public_url(self.settings.homeserver or ""), _why(exc), wait,
                )  # fmt: skip
            except Exception:
                wait = backoff.next()
                log.exception("matrix: sync failed; retrying in %.1fs", wait)
            await asyncio.sleep(wait)

    def _refused(self, exc: SinkRefused, wait: float) -> None:
        cause = exc.__cause__
        self._log.warning(
            "sink", "matrix: the gateway did not take event %s (%s: %s); syncing the same "
            "batch again in %.1fs", exc, type(cause).__name__, cause, wait,
        )  # fmt: skip

    async def _sync_once(self, *, deliver: bool, full_state: bool, timeout: int) -> None:
        client, session = self._require()
        response = await client.sync(
            timeout=timeout,
            since=session.next_batch or None,
            full_state=full_state or None,
            sync_filter=SYNC_FILTER if session.next_batch else FIRST_SYNC_FILTER,
        )
        if not isinstance(response, SyncResponse):
            raise convert.delivery_error(
                errcode=response.status_code,
                message=response.message,
                retry_after_ms=response.retry_after_ms,
            )
        await self._handle_invites(response)
        if deliver:
            await self._deliver(response)
        await self._crypto_chores()
        self._session = session.with_batch(response.next_batch)
        self._file.save(self._session)

    async def _crypto_chores(self) -> None:
        # What nio's sync_forever does between syncs: keys out, device lists in.
        client, _ = self._require()
        if client.olm is None:
            return
        await client.send_to_device_messages()
        if client.should_upload_keys:
            await client.keys_upload()
        if client.should_query_keys:
            await client.keys_query()
        if client.should_claim_keys:
            await client.keys_claim(client.get_users_for_key_claiming())

    async def _handle_invites(self, response: SyncResponse) -> None:
        client, _ = self._require()
        for room_id in response.rooms.invite:
            invited = client.invited_rooms.get(room_id)
            inviter = invited.inviter if invited is not None else None
            allow = self.settings.allow_users
            if convert.may_join(inviter, allow_users=allow, join_any=self.settings.join_any_invite):
                result = await client.join(room_id)
                log.info(
                    "matrix: join %s on invite from %s: %s", room_id, inviter, type(result).__name__
                )
            elif room_id not in self._seen_invites:
                self._seen_invites.add(room_id)
                log.warning(
                    "matrix: ignoring invite to %s from %s (not in allow_users)", room_id, inviter
                )

    async def _deliver(self, response: SyncResponse) -> None:
        client, _ = self._require()
        for room_id, info in response.rooms.join.items():
            room = client.rooms.get(room_id)
            if room is None:
                continue
            for event in info.timeline.events:
                await self._deliver_event(event, room)

    async def _deliver_event(self, event: Any, room: MatrixRoom) -> None:
        if isinstance(event, MegolmEvent):
            log.warning(
                "matrix: cannot decrypt event %s in %s from %s (megolm session %s): the "
                "sender has not shared its room key with device %s of %s; the message is "
                "not answered",
                event.event_id,
                room.room_id,
                event.sender,
                event.session_id,
                self.device_id,
                self.user_id,
            )
            return
        source = getattr(event, "source", None)
        if not isinstance(source, dict):
            return
        if source.get("type") == "m.reaction":
            await self._deliver_reaction(source, room)
            return
        context = convert.RoomContext(
            room_id=room.room_id,
            bot_user_id=self.user_id,
            bot_display_name=room.user_name(self.user_id) or self._display_name,
            member_count=room.member_count,  # joined + invited: a pending invite is no DM
            thread_replies=self.settings.thread_replies,
        )
        sender = source.get("sender")
        name = room.user_name(sender) if isinstance(sender, str) else None
        try:
            inbound = convert.inbound_from_event(source, room=context, sender_name=name or "")
        except Exception:
            # Never let one event fail the sync: its token would not be saved, and the same
            # batch, with the same event, would come back on every retry.
            log.warning(
                "matrix: dropped event %s that failed conversion",
                source.get("event_id"),
                exc_info=True,
            )
            return
        if inbound is None or self._sink is None:
            return
        if inbound.thread.thread:
            self._latest[(room.room_id, inbound.thread.thread)] = inbound.message_id
        inbound = await self._with_files(inbound, source)
        try:
            await self._sink(inbound)
        except Exception as exc:  # not taken: fail the sync, so its token is not saved
            raise SinkRefused(inbound.message_id) from exc

    def _context(self, room: MatrixRoom) -> convert.RoomContext:
        return convert.RoomContext(
            room_id=room.room_id,
            bot_user_id=self.user_id,
            bot_display_name=room.user_name(self.user_id) or self._display_name,
            member_count=room.member_count,
            thread_replies=self.settings.thread_replies,
        )

    async def _deliver_reaction(self, source: dict[str, Any], room: MatrixRoom) -> None:
        """A reaction on one of our messages with actions presses the action its key names
        (the annotated event is fetched, and decrypted in an encrypted room)."""
        found = convert.reaction_of(source)
        if found is None or source.get("sender") == self.user_id or self._sink is None:
            return
        target = await self._event_source(room.room_id, found[0])
        if target is None or target.get("sender") != self.user_id:
            return
        sender = source.get("sender")
        name = room.user_name(sender) if isinstance(sender, str) else None
        inbound = convert.pressed(source, target, room=self._context(room), sender_name=name or "")
        if inbound is None:
            return
        try:
            await self._sink(inbound)
        except Exception as exc:  # not taken: fail the sync, so its token is not saved
            raise SinkRefused(inbound.message_id) from exc

    async def _event_source(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        client, _ = self._require()
        try:
            response = await client.room_get_event(room_id, event_id)
        except (ClientError, TimeoutError) as exc:
            raise SinkRefused(event_id) from exc  # not now: the sync retries the batch
        if not isinstance(response, RoomGetEventResponse):
            return None
        event: Any = response.event
        if isinstance(event, MegolmEvent):
            try:
                event = client.decrypt_event(event)
            except (EncryptionError, LocalProtocolError):
                log.warning("matrix: cannot decrypt %s to read its actions", event_id)
                return None
        source = getattr(event, "source", None)
        return source if isinstance(source, dict) else None

    async def _with_files(self, inbound: Inbound, source: dict[str, Any]) -> Inbound:
        """Download the event's file when it may be for the bot (bounded, never raises)."""
        s = inbound.sender
        if s.is_self or s.is_bot or inbound.is_edit or self._client is None:
            return inbound
        if not (inbound.mentioned or inbound.is_dm or inbound.thread.thread):
            return inbound  # a timeline message not for the bot: its file is not ours
        try:
            refs = convert.file_refs(source)
        except Exception:
            log.warning("matrix: ignored the file of an event", exc_info=True)
            return inbound
        if not refs:
            return inbound
        limit = self.attachments.max_bytes
        got = await att.download_selected(
            refs,
            limits=self.attachments,
            download=lambda ref: mx_files.download(self._client, ref, limit),
        )
        return dataclasses.replace(inbound, attachments=got)

    async def send_file(self, thread: ThreadRef, file: OutFile, *, key: str) -> str:
        """Upload ``file`` and post it as an ``m.file`` event in the thread; its event id.

        In an encrypted room the file is uploaded encrypted and the event carries its keys.

        The event's transaction id comes from ``key``: a retry returns the event already
        sent (the upload itself may repeat).
        """
        client, _ = self._require()
        room_id, root = thread.chat, thread.thread
        room = client.rooms.get(room_id)
        url, keys = await mx_files.upload(
            client,
            name=file.name,
            content_type=file.content_type,
            data=file.data,
            encrypt=room is not None and room.encrypted,
        )
        content = convert.file_content(
            name=file.name,
            content_type=file.content_type,
            size=len(file.data),
            url=url,
            keys=keys,
            thread=root,
            latest=self._latest.get((room_id, root)) if root else None,
        )
        event_id = await self._room_send(room_id, content, key)
        if root:
            self._latest[(room_id, root)] = event_id
        return event_id

    def _require(self) -> tuple[AsyncClient, SessionState]:
        if self._client is None or self._session is None:
            raise DeliveryError("matrix adapter is not started")
        return self._client, self._session

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Post the parts of ``message`` not posted yet into its room and thread; return
        every part's event id.

        Exactly once: each part's transaction id comes from the outbox key and the part's
        index, so re-sending a part in doubt returns the event the homeserver already has.
        Matrix has no ephemeral messages, so ``ephemeral_to`` is posted like any reply.
        """
        if message.callback and not message.ephemeral_to:
            return []  # a reaction that decided: the edited request is the answer
        if message.edit_of:
            await self.edit(message.thread, message.edit_of, message.text)
            return [message.edit_of]
        msgtype = "m.notice" if message.kind == OutboundKind.STATUS else "m.text"
        room_id, root = message.thread.chat, message.thread.thread
        chunks = render_chunks(
            message.text, limit=self.settings.max_message_chars, chunker=self.chunker
        )
        book = parts or PartLog(key=message.idempotency_key)
        for index in book.todo(len(chunks)):
            part = chunks[index]
            content = convert.message_content(
                body=part.body,
                html=part.html,
                msgtype=msgtype,
                thread=root,
                latest=self._latest.get((room_id, root)) if root else None,
            )
            last = index == len(chunks) - 1
            if message.actions and last:
                content[convert.ACTIONS_FIELD] = convert.actions_field(message.actions)
            key = f"{book.key}:{index}" if book.key else None
            event_id = await self._room_send(room_id, content, key)
            if root:
                self._latest[(room_id, root)] = event_id
            await book.record(index, event_id)
            if message.actions and last:
                await self._offer_reactions(room_id, event_id, message, key)
        return book.ids(len(chunks))

    async def open_thread(self, parent: ThreadRef, title: str) -> OpenedThread:
        """A new thread root (a room message; its transaction id comes from the room and
        title, so a retried open returns the same event) and its ``matrix.to`` link."""
        limit = self.settings.max_message_chars
        chunk = render_chunks(f"{Icon.THREAD} {title}", limit=limit, chunker=self.chunker)[0]
        content = convert.message_content(
            body=chunk.body, html=chunk.html, msgtype="m.text", thread=None, latest=None
        )
        key = f"thread-root:{parent.chat}:{parent.thread or ''}:{title}"
        event_id = await self._room_send(parent.chat, content, key)
        thread = dataclasses.replace(parent, thread=event_id)
        return OpenedThread(thread=thread, link=convert.event_link(parent.chat, event_id))

    async def _offer_reactions(
        self, room_id: str, event_id: str, message: Outbound, key: str | None
    ) -> None:
        """React with each action's key, so a person taps one instead of typing it (best
        effort: the keys work without these)."""
        for react in convert.actions_field(message.actions):
            content = convert.reaction_content(event_id, react)
            try:
                tx_key = f"{key}:{react}" if key else None
                await self._room_send(room_id, content, tx_key, event_type="m.reaction")
            except DeliveryError as exc:
                log.warning("matrix: could not offer reaction %s: %s", react, exc)

    def http_routes(self) -> list[web.RouteDef]:
        """None: Matrix is read by syncing, not by webhooks."""
        return []

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        """Replace a status message's text with an ``m.replace`` edit."""
        rendered = render(text)
        content = convert.edit_content(
            original=message_id, body=rendered.body, html=rendered.html, msgtype="m.notice"
        )
        await self._room_send(thread.chat, content, None)

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        """Redact a status message (a run that ended quietly)."""
        client, _ = self._require()
        try:
            response = await client.room_redact(thread.chat, message_id)
        except (ClientError, TimeoutError) as exc:
            raise DeliveryError(f"matrix: redact in {thread.chat} failed: {exc}") from exc
        if isinstance(response, RoomRedactResponse):
            return
        raise convert.delivery_error(
            errcode=response.status_code,
            message=response.message,
            retry_after_ms=response.retry_after_ms,
        )

    async def typing(self, thread: ThreadRef) -> None:
        """Show the bot as typing in the room for a few seconds (best effort)."""
        client, _ = self._require()
        with contextlib.suppress(ClientError, TimeoutError):
            await client.room_typing(thread.chat, True, timeout=TYPING_TIMEOUT_MS)

    async def _room_send(
        self,
        room_id: str,
        content: dict[str, Any],
        key: str | None,
        *,
        event_type: str = "m.room.message",
    ) -> str:
        client, _ = self._require()
        # A stable transaction id makes a retried send after a lost response a no-op.
        tx_id = hashlib.sha256(key.encode()).hexdigest()[:32] if key else None
        try:
            response = await client.room_send(
                room_id, event_type, content, tx_id=tx_id, ignore_unverified_devices=True
            )
        except (ClientError, TimeoutError, SendRetryError) as exc:
            raise DeliveryError(f"matrix: send to {room_id} failed: {exc}") from exc
        except LocalProtocolError as exc:
            raise DeliveryError(f"matrix: cannot send to {room_id}: {exc}", permanent=True) from exc
        if isinstance(response, RoomSendResponse):
            log.debug("matrix: sent %s to %s", response.event_id, room_id)
            return str(response.event_id)
        raise convert.delivery_error(
            errcode=response.status_code,
            message=response.message,
            retry_after_ms=response.retry_after_ms,
        )


def _why(exc: BaseException) -> str:
    """``DNS lookup failed: …``, ``connection refused``, else the error's type and text."""
    reason = unreachable_reason(exc)
    if reason is not None:
        return reason
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
