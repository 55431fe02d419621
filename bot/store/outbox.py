"""The outbox and everything egress keeps beside it, in one owner.

Structures (keys in :mod:`bot.keys`): the ``outbox`` stream and its consumer group
``gateway``; per idempotency key the ``delivered`` marker, the ``sending`` lock and the
``parts`` hash (part index -> platform id of each part already posted); the ``outbox:dead``
stream; each gateway's ``alive`` key. Writers (workers, ingress, commands) append to the
stream through :class:`OutboxWriter` (sync, ``deps.outbox``), which also answers the few
sync reads (a posted part's id, the backlog for metrics); the gateway reads and settles
entries through :class:`Outbox` (async, a client with ``decode_responses=True``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis

from bot.keys import Keys
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import AsyncRedisOwner, Lua, RedisOwner
from bot.types import Outbound

GROUP = "gateway"
DELIVERED_TTL = 7 * 86_400  # the delivered marker and the parts hash live this long
DEAD_LETTER_MAXLEN = 100_000

Fields = Mapping[str, str]

# The sending lock: take it when free, extend it when ours (so a retried command is a no-op).
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""
_DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# One entry's state, and the sending lock taken for ARGV[2] when the entry still needs
# sending and nobody holds it (what the decision after a plain read would ask for next).
_OBSERVE = """
local delivered = redis.call('EXISTS', KEYS[1])
local pending = redis.call('XPENDING', KEYS[2], ARGV[4], ARGV[1], ARGV[1], 1)
local holder = nil
if delivered == 0 and #pending > 0
    and redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) then
  holder = ARGV[2]
else
  holder = redis.call('GET', KEYS[3])
end
local deliveries = 0
if #pending > 0 then deliveries = pending[1][4] end
return {delivered, #pending, deliveries, holder, redis.call('HGETALL', KEYS[4])}
"""
# Record the delivery, acknowledge the entry and drop the sending lock if ARGV[5] holds it.
_DELIVERED = """
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
redis.call('XACK', KEYS[2], ARGV[4], ARGV[1])
if redis.call('GET', KEYS[3]) == ARGV[5] then redis.call('DEL', KEYS[3]) end
return 1
"""


def encode(message: Outbound) -> dict[str, str]:
    """The stream fields of one outbox entry."""
    return {"data": json.dumps(message.to_json())}


_PUT_OUTBOUND = """
local function put_outbound(k, a)
  if a[1] ~= '' then redis.call('XADD', k[1], '*', 'data', a[1]) end
end
"""
PUT_OUTBOUND = Fragment(name="put_outbound", lua=_PUT_OUTBOUND, keys=1, args=1)
""":meth:`OutboxWriter.put` as a piece of a script spanning owners (``a[1]``: the encoded entry,
``""`` = none); see :mod:`bot.store.lua_parts`."""


def put_outbound_part(keys: Keys, message: Outbound | None) -> Part:
    """:data:`PUT_OUTBOUND`'s part for queueing ``message`` (None: queue nothing)."""
    data = encode(message)["data"] if message is not None else ""
    return Part(fragment=PUT_OUTBOUND, keys=(keys.outbox,), args=(data,))


@dataclass(frozen=True, kw_only=True)
class Backlog:
    """What the gateways have not settled yet (for metrics).

    Attributes:
        unacknowledged: Entries written and not acknowledged (read or not).
        oldest_seconds: Age of the oldest of them (0 when there is none).
    """

    unacknowledged: int
    oldest_seconds: float


UNREAD_COUNT_CAP = 10_000  # Redis < 7 has no group lag: unread entries are counted up to this


class OutboxWriter(RedisOwner):
    """The sync side of the outbox: queue messages, and the reads sync code needs."""

    def put(self, message: Outbound, *, pipe: redis.client.Pipeline | None = None) -> str:
        """Queue ``message`` for delivery; returns the stream entry id. With ``pipe`` the
        write joins the caller's batch (and the id is ``""``: the batch has not run yet)."""
        if pipe is not None:
            pipe.xadd(self.keys.outbox, encode(message))  # type: ignore[arg-type]
            return ""
        entry = self.redis.xadd(self.keys.outbox, encode(message))  # type: ignore[arg-type]
        return _text(entry)

    def posted_part(self, key: str, index: int = 0) -> str | None:
        """The platform id of part ``index`` of the message sent under ``key``, once posted."""
        raw = self.redis.hget(self.keys.parts(key), str(index))
        return None if raw is None else _text(raw)

    def backlog(self, *, now: float | None = None) -> Backlog:
        """The outbox's backlog (the metrics exporter's thread)."""
        now = time.time() if now is None else now
        outbox = self.keys.outbox
        try:
            groups: Any = self.redis.xinfo_groups(outbox)
        except redis.ResponseError:  # no stream yet
            return Backlog(unacknowledged=0, oldest_seconds=0.0)
        group = next((g for g in groups if _text(g.get("name")) == GROUP), None)
        last = _text(group.get("last-delivered-id")) if group else "0-0"
        summary: Any = self.redis.xpending(outbox, GROUP) if group else {"pending": 0}
        unread: Any = self.redis.xrange(outbox, min=f"({last}", max="+", count=UNREAD_COUNT_CAP)
        lag = group.get("lag") if group else None
        count = int(summary["pending"]) + (int(lag) if lag is not None else len(unread))
        firsts = [_text(summary["min"])] if summary["pending"] else []
        firsts += [_text(unread[0][0])] if unread else []
        oldest = min((entry_time(i) for i in firsts), default=now)
        return Backlog(unacknowledged=count, oldest_seconds=max(0.0, now - oldest))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entry_time(entry_id: str) -> float:
    """Epoch seconds at which the stream entry ``entry_id`` was written."""
    return stream_id(entry_id)[0] / 1000


def stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True, kw_only=True)
class EntryState:
    """Everything Redis says about one entry and its key, read in one round trip."""

    delivered: bool
    pending: bool
    deliveries: int
    holder: str | None
    holder_alive: bool
    parts: dict[int, str] = field(default_factory=dict)


class Outbox(AsyncRedisOwner):
    """The gateway's view of the outbox (async, reads and settles entries)."""

    _acquire = Lua(_ACQUIRE)
    _delete_if_equal = Lua(_DELETE_IF_EQUAL)
    _observe = Lua(_OBSERVE)
    _delivered = Lua(_DELIVERED)

    # -- the stream and its group -----------------------------------------------------------

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.keys.outbox, GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read_new(self, consumer: str, *, count: int = 100) -> list[Any]:
        """Entries never handed to any consumer, now ``consumer``'s (blocks up to 1 s)."""
        replies: Any = await self.redis.xreadgroup(
            GROUP, consumer, {self.keys.outbox: ">"}, count=count, block=1000
        )
        return [entry for _stream, entries in replies or [] for entry in entries]

    async def unacknowledged(
        self, consumer: str, *, besides: set[str], count: int = 100
    ) -> list[Any]:
        """Entries handed to ``consumer``, not acknowledged and not in ``besides``, with their
        fields (``None`` when trimmed). Read-only: delivery counts and idle times stay."""
        ids: list[str] = []
        low = "-"
        while True:
            found: Any = await self.redis.xpending_range(
                self.keys.outbox, GROUP, min=low, max="+", count=count, consumername=consumer
            )
            page = [str(p["message_id"]) for p in found if p["message_id"] != low]
            ids += [i for i in page if i not in besides]
            if len(found) < count or not page:
                break
            low = page[-1]
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xrange(self.keys.outbox, min=entry_id, max=entry_id)
            ranges = await pipe.execute() if ids else []
        return [(i, found[0][1] if found else None) for i, found in zip(ids, ranges, strict=True)]

    async def consumers(self) -> list[tuple[str, int]]:
        """``(name, pending count)`` of every consumer in the group."""
        found: Any = await self.redis.xinfo_consumers(self.keys.outbox, GROUP)
        return [(c["name"], int(c["pending"])) for c in found]

    async def pending_ids(self, consumer: str, *, count: int = 100) -> list[str]:
        found: Any = await self.redis.xpending_range(
            self.keys.outbox, GROUP, min="-", max="+", count=count, consumername=consumer
        )
        return [p["message_id"] for p in found]

    async def claim(self, consumer: str, ids: list[str]) -> list[Any]:
        """Move ``ids`` to ``consumer`` now; entries trimmed meanwhile come back empty."""
        claimed: Any = await self.redis.xclaim(
            self.keys.outbox, GROUP, consumer, min_idle_time=0, message_ids=list[Any](ids)
        )
        return list(claimed)

    async def autoclaim(self, consumer: str, idle_ms: int, start: str) -> tuple[str, list[Any]]:
        """Claim entries idle for ``idle_ms``; returns the next start id and the entries."""
        result: Any = await self.redis.xautoclaim(
            self.keys.outbox, GROUP, consumer, idle_ms, start_id=start, count=100
        )
        return str(result[0]), list(result[1])

    async def forget_consumer(self, name: str) -> None:
        await self.redis.xgroup_delconsumer(self.keys.outbox, GROUP, name)

    async def ack(self, entry_id: str) -> None:
        await self.redis.xack(self.keys.outbox, GROUP, entry_id)

    async def trim(self, *, keep_seconds: float) -> int:
        """Drop entries every group acknowledged and older than ``keep_seconds``."""
        floor = f"{int((time.time() - keep_seconds) * 1000)}-0"
        groups: Any = await self.redis.xinfo_groups(self.keys.outbox)
        for group in groups:
            summary: Any = await self.redis.xpending(self.keys.outbox, group["name"])
            low = summary["min"] if summary["pending"] else group["last-delivered-id"]
            if stream_id(low) < stream_id(floor):
                floor = low  # never past an entry someone has not acknowledged
        if not groups:
            return 0
        return int(await self.redis.xtrim(self.keys.outbox, minid=floor, approximate=False))

    async def drained(self) -> bool:
        """True when every entry written so far has been read and acknowledged."""
        info: Any = await self.redis.xinfo_groups(self.keys.outbox)
        group = next((g for g in info if g["name"] == GROUP), None)
        if group is None:
            return False
        stream: Any = await self.redis.xinfo_stream(self.keys.outbox)
        return bool(
            group["pending"] == 0 and group["last-delivered-id"] == stream["last-generated-id"]
        )

    # -- one entry ---------------------------------------------------------------------------

    async def observe(self, entry_id: str, key: str, *, me: str, lock_seconds: float) -> EntryState:
        """The entry's state in one round trip; on the way the sending lock of ``key`` is
        taken for ``me`` if the entry still needs sending and nobody holds it.

        A lock held by ``me`` counts as alive unasked; another holder's liveness costs a
        second round trip (only while another gateway sends, or died sending).
        """
        keys = [self.keys.delivered(key), self.keys.outbox, self.keys.sending(key)]
        reply: Any = await self._observe(
            keys=[*keys, self.keys.parts(key)],
            args=[entry_id, me, int(lock_seconds * 1000), GROUP],
        )
        delivered, pending, deliveries, holder, flat = reply
        alive = holder == me or (
            holder is not None and bool(await self.redis.exists(self.keys.gateway_alive(holder)))
        )
        return EntryState(
            delivered=bool(delivered),
            pending=bool(pending),
            deliveries=int(deliveries),
            holder=holder,
            holder_alive=alive,
            parts={int(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)},
        )

    async def lock(self, key: str, consumer: str, *, seconds: float) -> bool:
        """Take or extend the sending lock of ``key`` for ``consumer``."""
        return bool(
            await self._acquire(keys=[self.keys.sending(key)], args=[consumer, int(seconds * 1000)])
        )

    async def unlock(self, key: str, holder: str) -> bool:
        """Drop the sending lock of ``key`` if ``holder`` holds it."""
        return bool(await self._delete_if_equal(keys=[self.keys.sending(key)], args=[holder]))

    async def posted(self, key: str) -> dict[int, str]:
        """Part index -> platform id of what was posted under ``key`` so far."""
        parts: Any = await self.redis.hgetall(self.keys.parts(key))
        return {int(index): str(value) for index, value in parts.items()}

    async def record_part(self, key: str, index: int, message_id: str) -> None:
        # No MULTI: both writes are idempotent and a pipeline cut short is sent again whole
        # (the client retries), so the part is recorded with its expiry either way.
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(self.keys.parts(key), str(index), message_id)
            pipe.expire(self.keys.parts(key), DELIVERED_TTL)
            await pipe.execute()

    async def mark_delivered(self, entry_id: str, key: str, ids: list[str], *, holder: str) -> None:
        """Record ``key`` delivered as ``ids``, acknowledge the entry and drop the sending
        lock if ``holder`` holds it, atomically in one round trip."""
        keys = [self.keys.delivered(key), self.keys.outbox, self.keys.sending(key)]
        args: list[str | int] = [entry_id, json.dumps(ids), DELIVERED_TTL, GROUP, holder]
        await self._delivered(keys=keys, args=args)

    async def dead_letter(self, entry_id: str, fields: Fields, reason: str) -> None:
        dead: dict[Any, Any] = {**fields, "reason": reason, "entry_id": entry_id}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.keys.dead_letter, dead, maxlen=DEAD_LETTER_MAXLEN, approximate=True)
            pipe.xack(self.keys.outbox, GROUP, entry_id)
            await pipe.execute()

    # -- gateway liveness --------------------------------------------------------------------

    async def beat(self, consumer: str, *, ttl: float) -> None:
        """Refresh ``consumer``'s liveness key (it lapses ``ttl`` seconds after a crash)."""
        alive = self.keys.gateway_alive(consumer)
        await self.redis.set(alive, f"{time.time():.3f}", px=int(ttl * 1000))

    async def last_beat(self, consumer: str) -> str | None:
        value: Any = await self.redis.get(self.keys.gateway_alive(consumer))
        return None if value is None else str(value)

    async def retire(self, consumer: str) -> None:
        """Drop ``consumer``'s liveness key so others take its entries over at once."""
        await self.redis.delete(self.keys.gateway_alive(consumer))
