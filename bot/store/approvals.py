"""Approvals: tool calls of parked runs and turns waiting for a person (the owner of ``{p}approval:*``
and ``{p}approvals:due``).

An approval moves ``pending -> approved | denied | expired`` exactly once: :meth:`decide`
is one script that checks ``pending`` and writes the decision, who and when, and drops the
approval from the due set. The due set (score: when no answer means deny) is what the
maintenance sweep reads; the record itself outlives the decision for ``keep_seconds`` so
``/subagents info`` and late button presses still find it.
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass, field
from typing import Any

from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.types import ThreadRef

KEEP_SECONDS = 7 * 86_400


class ApprovalState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class ApprovalKind(enum.StrEnum):
    """What waits: a parked run's tool call, or a spawn held before it starts (its cost
    estimate is above ``budgets.approve_above_usd``: :mod:`bot.runs.spawn_approval`)."""

    TOOL = "tool"
    SPAWN = "spawn"


@dataclass(frozen=True, kw_only=True)
class PendingCall:
    """One tool call the model asked for (JSON-able, for the approval record)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class ApprovalRecord:
    """A tool call waiting for (or past) a person's decision. It belongs to a parked run
    (``run_id``) or a parked main-agent turn (``reply_key``): one gate for every caller
    (docs/architecture.md, "Approvals: one gate").

    Attributes:
        approval_id: Short id people type (``!approve <id>``).
        run_id: The parked run ("" for a turn).
        reply_key: The parked turn (:attr:`bot.store.jobs.TurnJob.reply_key`; "" for a run).
        thread: Where the request was posted.
        requester: Qualified ``platform:user`` who started the run (may decide).
        calls: The call waiting for approval first, then the calls of the same model step
            after it (they run, or wait in turn, once this one is decided).
        state: pending, approved, denied or expired.
        decided_by: Who decided (a platform user id; "" for a timeout).
        decided_at: When (epoch seconds).
        arguments: The arguments to run the call with (edited ones when approved with new).
        created_at: When the run parked.
        due_at: When no answer means deny.
        kind: A tool call, or a held spawn (whose ``calls`` is its ``sessions_spawn``).
        detail: What the request shows besides the call (a spawn: its estimate).
    """

    approval_id: str
    run_id: str
    thread: ThreadRef
    requester: str
    calls: tuple[PendingCall, ...]
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str = ""
    decided_at: float | None = None
    arguments: str = ""
    created_at: float = 0.0
    due_at: float = 0.0
    label: str = field(default="")
    kind: ApprovalKind = ApprovalKind.TOOL
    detail: str = ""
    reply_key: str = ""

    @property
    def for_turn(self) -> bool:
        """It holds a main-agent turn (not a run)."""
        return bool(self.reply_key)

    @property
    def call(self) -> PendingCall:
        return self.calls[0]

    @property
    def request_key(self) -> str:
        """The outbox key of the request message (its parts log holds its platform id)."""
        return f"approval:{self.approval_id}"


def encode(record: ApprovalRecord) -> dict[str, str]:
    return {
        "approval_id": record.approval_id,
        "run_id": record.run_id,
        "thread": json.dumps(record.thread.to_json()),
        "requester": record.requester,
        "calls": json.dumps([c.__dict__ for c in record.calls]),
        "state": record.state.value,
        "decided_by": record.decided_by,
        "decided_at": "" if record.decided_at is None else str(record.decided_at),
        "arguments": record.arguments,
        "created_at": str(record.created_at),
        "due_at": str(record.due_at),
        "label": record.label,
        "kind": record.kind.value,
        "detail": record.detail,
        "reply_key": record.reply_key,
    }


def decode(raw: dict[str, str]) -> ApprovalRecord:
    calls: list[dict[str, Any]] = json.loads(raw["calls"])
    return ApprovalRecord(
        approval_id=raw["approval_id"],
        run_id=raw["run_id"],
        thread=ThreadRef.from_json(json.loads(raw["thread"])),
        requester=raw.get("requester", ""),
        calls=tuple(PendingCall(**c) for c in calls),
        state=ApprovalState(raw.get("state", "pending")),
        decided_by=raw.get("decided_by", ""),
        decided_at=float(raw["decided_at"]) if raw.get("decided_at") else None,
        arguments=raw.get("arguments", ""),
        created_at=float(raw.get("created_at") or 0),
        due_at=float(raw.get("due_at") or 0),
        label=raw.get("label", ""),
        kind=ApprovalKind(raw.get("kind") or ApprovalKind.TOOL),
        detail=raw.get("detail", ""),
        reply_key=raw.get("reply_key", ""),
    )


_DECIDE = """
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'decided_by', ARGV[2], 'decided_at', ARGV[3],
  'arguments', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[2], ARGV[6])
return 1
"""


class Approvals(RedisOwner):
    """Every read and write of the approval hashes and their due set."""

    _decide = Lua(_DECIDE)

    def create(self, record: ApprovalRecord) -> None:
        """Store a pending approval and its deadline (one transaction)."""
        key = self.keys.approval(record.approval_id)
        with self.redis.pipeline() as pipe:
            pipe.hset(key, mapping=encode(record))  # type: ignore[arg-type]
            pipe.expire(key, int(record.due_at - time.time()) + KEEP_SECONDS)
            pipe.zadd(self.keys.approvals_due, {record.approval_id: record.due_at})
            pipe.execute()

    def get(self, approval_id: str) -> ApprovalRecord | None:
        raw = self.redis.hgetall(self.keys.approval(approval_id))
        if not raw:
            return None
        return decode({as_text(k): as_text(v) for k, v in raw.items()})

    def decide(
        self,
        approval_id: str,
        *,
        state: ApprovalState,
        by: str,
        arguments: str,
        now: float | None = None,
    ) -> bool:
        """pending -> ``state`` with who, when and the arguments; False if already decided."""
        now = time.time() if now is None else now
        keys = [self.keys.approval(approval_id), self.keys.approvals_due]
        args = [state.value, by, now, arguments, KEEP_SECONDS, approval_id]
        return bool(self._decide(keys=keys, args=args))

    def due(self, *, now: float, limit: int = 100) -> list[str]:
        """Pending approvals whose time ran out."""
        raw = self.redis.zrangebyscore(self.keys.approvals_due, "-inf", now, start=0, num=limit)
        return [as_text(i) for i in raw]

    def pending(self) -> list[str]:
        """Every pending approval id, oldest deadline first."""
        return [as_text(i) for i in self.redis.zrange(self.keys.approvals_due, 0, -1)]
