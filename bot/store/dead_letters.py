"""The dead-letter stream, read and replayed by operators (``fanbot doctor``, the ops page).

Egress writes it (:meth:`bot.store.outbox.Outbox.dead_letter`); this sync owner reads it
and moves entries back into the outbox once the cause is fixed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.store import as_text
from bot.store.owner import RedisOwner

ENTRY_ID = re.compile(r"\d{1,20}-\d{1,20}")
"""A stream entry id (what :meth:`DeadLetters.replay_one` accepts)."""

# XDEL first: a dead letter is put back at most once, even with two operators replaying.
_REPLAY = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  return redis.call('XADD', KEYS[2], '*', 'data', ARGV[2])
end
return false
"""


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """One entry of the dead-letter stream (its fields as text)."""

    entry_id: str
    fields: dict[str, str]


class DeadLetters(RedisOwner):
    """Owner of ``outbox:dead`` for operators."""

    @property
    def key(self) -> str:
        return self.keys.dead_letter

    def count(self) -> int:
        return int(self.redis.xlen(self.keys.dead_letter))

    def newest(self) -> DeadLetter | None:
        entries: Any = self.redis.xrevrange(self.keys.dead_letter, count=1)
        if not entries:
            return None
        entry_id, fields = entries[0]
        return DeadLetter(
            entry_id=as_text(entry_id), fields={as_text(k): as_text(v) for k, v in fields.items()}
        )

    def recent(self, limit: int = 100) -> list[DeadLetter]:
        """The ``limit`` newest dead letters, newest first."""
        entries: Any = self.redis.xrevrange(self.keys.dead_letter, count=limit)
        return [
            DeadLetter(
                entry_id=as_text(entry_id),
                fields={as_text(k): as_text(v) for k, v in fields.items()},
            )
            for entry_id, fields in entries
        ]

    def replay_one(self, entry_id: str) -> bool:
        """Move one dead letter back into the outbox; False if it is gone or has no body
        (already replayed, by this or another operator, or kept for inspection)."""
        if not ENTRY_ID.fullmatch(entry_id):
            return False
        entries: Any = self.redis.xrange(self.keys.dead_letter, entry_id, entry_id)
        if not entries:
            return False
        fields = entries[0][1]
        data = fields.get(b"data", fields.get("data"))
        if data is None:
            return False
        keys = [self.keys.dead_letter, self.keys.outbox]
        return bool(self.redis.eval(_REPLAY, 2, *keys, entry_id, data))

    def replay(self) -> tuple[int, int]:
        """Move every dead letter back into the outbox, oldest first; the gateway redelivers.

        Idempotency keys are kept, so a message that did arrive after all is not posted twice.
        Returns ``(replayed, kept)``; entries without a message body are kept for inspection.
        """
        replayed = kept = 0
        entries: Any = self.redis.xrange(self.keys.dead_letter)
        for entry_id, fields in entries:
            data = fields.get(b"data", fields.get("data"))
            if data is None:
                kept += 1
                continue
            keys = [self.keys.dead_letter, self.keys.outbox]
            if self.redis.eval(_REPLAY, 2, *keys, entry_id, data):
                replayed += 1
        return replayed, kept
