"""Steer receipts: the ``/subagents send`` reply says what happened to the message.

A message for a running run is *queued* until the run reads it between two steps
(*delivered*, :func:`read_inbox`), or the run ends first (*missed*: a follow-up run takes
it, :func:`bot.runs.send.settle_leftovers`). The reply is posted saying "queued"; each
change writes an edit of that reply (an :class:`~bot.types.Outbound` whose ``replaces``
names the reply's idempotency key; egress looks its platform id up). An ephemeral reply
cannot be edited: the change follows as a new ephemeral message.
"""

from __future__ import annotations

import uuid

from bot.deps import Deps
from bot.runs.naming import Icon
from bot.store.receipts import Receipt, ReceiptState
from bot.types import Outbound, OutboundKind, RunRecord, ThreadRef


def receipt_text(receipt: Receipt) -> str:
    """The reply for a receipt in its state (pure)."""
    name = receipt.name
    if receipt.state is ReceiptState.QUEUED:
        return f"{Icon.STEERED} Queued for {name}: it reads your message before its next step."
    if receipt.state is ReceiptState.DELIVERED:
        return f"{Icon.DELIVERED} Delivered to {name}: it read your message between two steps."
    if receipt.follow_up:
        return (
            f"{Icon.FOLLOW_UP} {name[0].upper()}{name[1:]} ended before reading your message, "
            f"so I started a follow-up on the same session with it: run {receipt.follow_up}. "
            "Its answer will be announced here."
        )
    return (
        f"{Icon.WARNING} {name[0].upper()}{name[1:]} ended before reading your message, "
        "so it was not delivered. Send it again to start a follow-up."
    )


def new_receipt(
    deps: Deps,
    *,
    run: RunRecord,
    name: str,
    thread: ThreadRef,
    reply_key: str,
    ephemeral_to: str | None,
) -> Receipt:
    """Record a queued receipt for a message about to go into ``run``'s inbox."""
    receipt = Receipt(
        receipt_id=uuid.uuid4().hex,
        state=ReceiptState.QUEUED,
        run_id=run.run_id,
        name=name,
        thread=thread,
        reply_key=reply_key,
        ephemeral_to=ephemeral_to,
    )
    deps.receipts.create(receipt)
    return receipt


def settle(deps: Deps, receipt_id: str, state: ReceiptState, *, follow_up: str = "") -> bool:
    """Move a queued receipt on and rewrite its reply; False if it had moved already."""
    store = deps.receipts
    if not receipt_id or not store.settle(receipt_id, state, follow_up=follow_up):
        return False
    receipt = store.get(receipt_id)
    if receipt is not None:
        deps.outbox.put(update_of(receipt))
    return True


def update_of(receipt: Receipt) -> Outbound:
    """The message rewriting ``receipt``'s reply (pure)."""
    return Outbound(
        thread=receipt.thread,
        text=receipt_text(receipt),
        kind=OutboundKind.REPLY,
        idempotency_key=f"receipt:{receipt.receipt_id}:{receipt.state.value}",
        ephemeral_to=receipt.ephemeral_to,
        replaces="" if receipt.ephemeral_to else receipt.reply_key,
    )


def read_inbox(deps: Deps, run_id: str) -> list[str]:
    """The run's steering (its loop calls this between steps): take the queued messages
    and mark their receipts delivered."""
    items = deps.runs.drain_inbox_receipts(run_id)
    for _, receipt_id in items:
        settle(deps, receipt_id, ReceiptState.DELIVERED)
    return [message for message, _ in items]
