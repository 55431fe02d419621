"""Small ports between the core and its edges.

A channel adapter converts between a platform and the core's :class:`~bot.types.Inbound` /
:class:`~bot.types.Outbound`. It does nothing else: no Redis, no business rules. Its port
has two halves of three methods each, :class:`InboundChannel` (events in) and
:class:`OutboundChannel` (messages out); :class:`ChannelAdapter` is both.

The adapter contract
--------------------

**Ingress confirms only what the core accepted.** An adapter confirms a native event to
the platform (Socket Mode ack, HTTP 200 to a webhook, the next ``getUpdates`` offset, the
saved sync token) only after ``await sink(inbound)`` returned. If the sink raises, the
event stays unconfirmed and the platform delivers it again; the gateway dedupes by event
id, so a redelivery is harmless. An event the adapter cannot convert (a converter bug or a
malformed payload) is logged and confirmed: redelivering it would fail the same way.

**Egress never repeats a part.** ``send`` splits a message into parts the same way every
time (same text, same settings, same parts). The gateway's egress keeps, in Redis beside
the outbox entry, which parts are already posted (:class:`PartLog`). The adapter skips
those, and after the platform accepted a part it awaits :meth:`PartLog.record` before it
posts the next one, so a retry, a restart or another gateway taking the entry over resumes
at the first part not posted. The only part that can be in doubt is one the platform
accepted while the gateway died before recording it (``PartLog.in_doubt``); what happens
to it depends on what the platform lets a bot read back:

============  ===================  ==================================================
platform      guarantee            how the part in doubt is settled
============  ===================  ==================================================
Slack         exactly once         each part carries message metadata (event type
                                   ``fanbot_outbox``, the outbox key and part index);
                                   the thread's recent messages are searched for it
                                   before re-posting (needs ``*:history`` scopes; an
                                   ephemeral answer cannot be found: at least once)
Matrix        exactly once         each part is sent with a transaction id derived from
                                   the key and index; the homeserver returns the event
                                   already sent (same device / access token)
Telegram      at least once        the Bot API has no way for a bot to read its chat;
                                   the one part in doubt is posted again
console       at least once        a terminal cannot be read back
============  ===================  ==================================================

**Files after the text.** An outbound message's ``attachments`` (workspace paths) are
posted by egress after its text parts, through :class:`FileChannel`; file ``i`` is part
``len(text parts) + i`` of the same :class:`PartLog`, so a retry never re-posts a file the
log records. A file in doubt is posted again on Slack and Telegram (at least once); on
Matrix its event's transaction id comes from the key and index (exactly once for the
event; the media upload itself may repeat).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from bot.types import Inbound, Outbound, ThreadRef

if TYPE_CHECKING:
    from aiohttp import web

InboundSink = Callable[[Inbound], Awaitable[object]]
"""What an adapter calls for every native event it converted."""

PartRecorder = Callable[[int, str], Awaitable[None]]
"""``(part index, platform message id) -> None``: persists one posted part."""


@dataclass(kw_only=True)
class PartLog:
    """The parts of one outbox message that are already posted, and where to record more.

    Egress builds one per attempt from Redis; a caller without an outbox (a test, a status
    line) leaves ``send``'s ``parts`` out and gets a fresh one.

    Args:
        key: The outbox key of the message (Slack writes it into each part's metadata).
        posted: Part index -> platform message id, for the parts known to be posted.
        in_doubt: An earlier attempt may have posted a part it did not record (a gateway
            died mid-send, a send timed out): look before re-posting where possible.
        since: Epoch seconds before which no part can have been posted (the entry's age).
        recorder: Persists each newly posted part before the adapter moves on.
    """

    key: str = ""
    posted: dict[int, str] = field(default_factory=dict)
    in_doubt: bool = False
    since: float | None = None
    recorder: PartRecorder | None = None

    def todo(self, count: int) -> list[int]:
        """Indexes of the first ``count`` parts not posted yet, in order."""
        return [i for i in range(count) if i not in self.posted]

    def ids(self, count: int) -> list[str]:
        """Platform ids of the first ``count`` parts, in order (posted ones only)."""
        return [self.posted[i] for i in range(count) if i in self.posted]

    async def record(self, index: int, message_id: str) -> None:
        """Note part ``index`` as posted; returns once it is persisted."""
        self.posted[index] = message_id
        if self.recorder is not None:
            await self.recorder(index, message_id)


@runtime_checkable
class InboundChannel(Protocol):
    """The receiving half: turns native events into calls of the sink."""

    platform: str

    async def start(self, sink: InboundSink) -> None:
        """Connect and begin delivering native events to ``sink``; returns once running."""

    async def stop(self) -> None:
        """Disconnect and release resources."""

    def http_routes(self) -> list[web.RouteDef]:
        """Routes the gateway's HTTP server must serve (webhooks); ``[]`` if none."""


@runtime_checkable
class OutboundChannel(Protocol):
    """The sending half.

    ``send`` returns the platform ids of the messages it posted (several when the text was
    split). It raises :class:`bot.errors.DeliveryError` on failure, with ``retry_after`` set
    when the platform said how long to wait and ``permanent`` when retrying cannot help.
    """

    platform: str

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Post the parts of ``message`` that ``parts`` does not list as posted, in order,
        recording each in ``parts`` before the next; return every part's id."""

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        """Replace the text of an earlier message (status lines)."""

    async def typing(self, thread: ThreadRef) -> None:
        """Show a typing / working indicator where the platform has one."""


@dataclass(frozen=True, kw_only=True)
class OutFile:
    """A file to post into a thread (read from the workspace by egress)."""

    name: str
    content_type: str
    data: bytes = field(repr=False)


@runtime_checkable
class FileChannel(Protocol):
    """An adapter that can post files (Slack, Telegram, Matrix)."""

    async def send_file(self, thread: ThreadRef, file: OutFile, *, key: str) -> str:
        """Post ``file`` into ``thread``; return the platform's id for it.

        ``key`` is stable per outbox message and file (a transaction id where the platform
        has one).
        """


@runtime_checkable
class DeletingChannel(Protocol):
    """An adapter that can remove a message it posted (every shipped adapter can).

    Used for a status card that ends quietly (a run that announces nothing); where
    ``delete`` is missing or refused, the card is edited to a neutral line instead.
    """

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        """Remove the message ``message_id`` from ``thread``; raises
        :class:`bot.errors.DeliveryError` when the platform refused or cannot."""


@dataclass(frozen=True, kw_only=True)
class OpenedThread:
    """A thread an adapter opened: where it lives and a link people can follow.

    ``link`` is a URL where the platform has one (Slack permalink, Telegram ``t.me``
    link, Matrix ``matrix.to`` link), else a few words naming it ("topic X").
    """

    thread: ThreadRef
    link: str


@runtime_checkable
class ThreadOpener(Protocol):
    """An adapter that can open a new thread beside ``parent`` (a thread-bound child's):
    a Telegram forum topic, a Slack top-level message, a Matrix thread root."""

    async def open_thread(self, parent: ThreadRef, title: str) -> OpenedThread:
        """Open a thread titled ``title`` in ``parent``'s chat; raises
        :class:`bot.errors.DeliveryError` (``permanent`` when it cannot be done there)."""


@runtime_checkable
class ChannelAdapter(InboundChannel, OutboundChannel, Protocol):
    """One platform connection, owned by the gateway (see the contract above)."""
