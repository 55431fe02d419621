"""Small ports between the core and its edges.

A channel adapter converts between a platform and the core's :class:`~bot.types.Inbound` /
:class:`~bot.types.Outbound`. It does nothing else: no Redis, no business rules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from bot.types import Inbound, Outbound, ThreadRef

InboundSink = Callable[[Inbound], Awaitable[object]]
"""What an adapter calls for every native event it converted."""


@runtime_checkable
class ChannelAdapter(Protocol):
    """One platform connection, owned by the gateway.

    ``send`` returns the platform ids of the messages it posted (several when the text was
    split). It raises :class:`bot.errors.DeliveryError` on failure, with ``retry_after`` set
    when the platform said how long to wait and ``permanent`` when retrying cannot help.
    """

    platform: str

    async def start(self, sink: InboundSink) -> None:
        """Connect and begin delivering native events to ``sink``; returns once running."""

    async def stop(self) -> None:
        """Disconnect and release resources."""

    async def send(self, message: Outbound) -> list[str]:
        """Post ``message`` (chunked and formatted for the platform) into its thread."""

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        """Replace the text of an earlier message (status lines)."""

    async def typing(self, thread: ThreadRef) -> None:
        """Show a typing / working indicator where the platform has one."""
