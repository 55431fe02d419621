"""An in-memory channel adapter for tests: say things into it, read what the bot posted."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web

from bot.errors import DeliveryError
from bot.ports import InboundSink, PartLog
from bot.types import Inbound, Outbound, OutboundKind, Sender, ThreadRef


@dataclass(frozen=True, kw_only=True)
class Edit:
    thread: ThreadRef
    message_id: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Deleted:
    thread: ThreadRef
    message_id: str


class MemoryChannel:
    """A ChannelAdapter that records everything and can be told to fail.

    Args:
        platform: Platform name it serves (``console`` by default).
    """

    def __init__(self, *, platform: str = "console") -> None:
        self.platform = platform
        self.sent: list[Outbound] = []
        self.edits: list[Edit] = []
        self.deleted: list[Deleted] = []
        self.typing_in: list[ThreadRef] = []
        self.failures: list[DeliveryError] = []
        self.attempts = 0
        self._sink: InboundSink | None = None
        self._ids = itertools.count(1)

    def thread(self, name: str | None = "main", *, chat: str = "chat") -> ThreadRef:
        return ThreadRef(platform=self.platform, account="test", chat=chat, thread=name)

    async def start(self, sink: InboundSink) -> None:
        self._sink = sink

    async def stop(self) -> None:
        self._sink = None

    async def say(
        self,
        text: str,
        *,
        thread: ThreadRef | None = None,
        user: str = "alice",
        mentioned: bool = True,
        message_id: str | None = None,
        is_dm: bool = False,
    ) -> object:
        """Deliver a message as if ``user`` wrote it; returns the gateway's result."""
        assert self._sink is not None, "channel not started"
        inbound = Inbound(
            thread=thread or self.thread(),
            sender=Sender(user_id=user, display_name=user),
            text=text,
            message_id=message_id or f"m{next(self._ids)}",
            mentioned=mentioned,
            is_dm=is_dm,
        )
        return await self._sink(inbound)

    def fail_next(self, errors: Iterable[DeliveryError]) -> None:
        """The next sends raise these errors, in order."""
        self.failures.extend(errors)

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Record ``message`` as one part (nothing when ``parts`` says it is posted)."""
        book = parts or PartLog(key=message.idempotency_key)
        if book.todo(1):
            self.attempts += 1
            if self.failures:
                raise self.failures.pop(0)
            self.sent.append(message)
            await book.record(0, f"msg-{len(self.sent)}")
        return book.ids(1)

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        self.edits.append(Edit(thread=thread, message_id=message_id, text=text))

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        self.deleted.append(Deleted(thread=thread, message_id=message_id))

    async def typing(self, thread: ThreadRef) -> None:
        self.typing_in.append(thread)

    def http_routes(self) -> list[web.RouteDef]:
        return []

    def of_kind(self, kind: OutboundKind, thread: ThreadRef | None = None) -> list[Outbound]:
        return [m for m in self.sent if m.kind is kind and (thread is None or m.thread == thread)]

    @property
    def announces(self) -> list[Outbound]:
        return self.of_kind(OutboundKind.ANNOUNCE)

    @property
    def replies(self) -> list[Outbound]:
        return self.of_kind(OutboundKind.REPLY)
