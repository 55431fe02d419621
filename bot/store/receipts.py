"""Steer receipts: what became of each ``/subagents send`` message, in one owner.

One hash per receipt (``receipt:{id}``, keys in :mod:`bot.keys`): its state (``queued``
until the run reads the message or ends without reading it), the chat reply that shows
it, and what that reply needs to be rewritten. A receipt leaves ``queued`` once, by a
compare-and-set (:meth:`Receipts.settle`), so the reader and the run's end never both
claim the same message.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.types import ThreadRef

RECEIPT_TTL = 7 * 86_400

_SETTLE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'queued' then
  return 0
end
for i = 1, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return 1
"""


class ReceiptState(enum.StrEnum):
    """Where a steering message is."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    MISSED = "missed"


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """One steering message's fate and the reply that shows it.

    Attributes:
        receipt_id: Its id.
        state: queued, delivered (read between steps) or missed (the run ended first).
        run_id: The run it was queued for.
        name: How the reply names that run (``subagent #1 · work``).
        thread: Where the reply is.
        reply_key: Idempotency key of the reply (edited when the state changes).
        ephemeral_to: The reply was ephemeral to this user (it cannot be edited: a new
            ephemeral message follows instead).
        follow_up: ``#4 (`ab12cd34`)`` when a missed message started a follow-up run.
    """

    receipt_id: str
    state: ReceiptState
    run_id: str
    name: str
    thread: ThreadRef
    reply_key: str
    ephemeral_to: str | None = None
    follow_up: str = ""


class Receipts(RedisOwner):
    """Owner of the receipt hashes."""

    _settle = Lua(_SETTLE)

    def create(self, receipt: Receipt) -> None:
        key = self.keys.receipt(receipt.receipt_id)
        fields: dict[Any, Any] = {
            "state": receipt.state.value,
            "run_id": receipt.run_id,
            "name": receipt.name,
            "thread": json.dumps(receipt.thread.to_json()),
            "reply_key": receipt.reply_key,
            "ephemeral_to": receipt.ephemeral_to or "",
            "follow_up": receipt.follow_up,
        }
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, RECEIPT_TTL)
            pipe.execute()

    def get(self, receipt_id: str) -> Receipt | None:
        raw: Any = self.redis.hgetall(self.keys.receipt(receipt_id))
        f = {as_text(k): as_text(v) for k, v in (raw or {}).items()}
        if not f:
            return None
        try:
            return Receipt(
                receipt_id=receipt_id,
                state=ReceiptState(f["state"]),
                run_id=f["run_id"],
                name=f["name"],
                thread=ThreadRef.from_json(json.loads(f["thread"])),
                reply_key=f["reply_key"],
                ephemeral_to=f.get("ephemeral_to") or None,
                follow_up=f.get("follow_up", ""),
            )
        except (KeyError, ValueError, TypeError):
            return None

    def settle(self, receipt_id: str, state: ReceiptState, *, follow_up: str = "") -> bool:
        """Move a queued receipt to ``state``; False when it had left ``queued`` already."""
        args = ["state", state.value, "follow_up", follow_up]
        return bool(self._settle(keys=[self.keys.receipt(receipt_id)], args=args))
