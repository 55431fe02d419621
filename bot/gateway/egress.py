"""Egress: deliver the outbox stream to the platforms, each message exactly once.

A consumer group spreads entries over gateways; an entry is acknowledged only after the
platform accepted it, and its idempotency key is recorded as delivered in the same
transaction, so a redelivery (after a crash, a reclaim, a second gateway) is a no-op.
Entries are processed in order per thread by one lane task per thread, so one slow or
rate-limited thread never holds up the others. Failed sends retry with backoff honouring
Retry-After; after the budget the entry goes to the dead-letter stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bot.config import GatewaySettings
from bot.errors import DeliveryError
from bot.keys import Keys
from bot.ports import ChannelAdapter
from bot.types import Outbound

log = logging.getLogger(__name__)

GROUP = "gateway"
DELIVERED_TTL = 7 * 86_400
SENDING_LOCK_MS = 120_000


@dataclass(frozen=True, kw_only=True)
class Entry:
    entry_id: str
    message: Outbound | None
    raw: Mapping[str, str]
    lane: str


def reraise_if_cancelling() -> None:
    """redis-py may turn a cancelled blocking read into ConnectionError; keep the cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel until done: a client library may swallow one cancel (never await unbounded)."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=1)


def backoff(attempt: int, *, base: float, cap: float) -> float:
    """Exponential backoff: base, 2·base, 4·base … capped (attempt counts from 1)."""
    return float(min(cap, base * 2 ** (attempt - 1)))


def parse_entry(entry_id: str, fields: Mapping[str, str]) -> Entry:
    try:
        message = Outbound.from_json(json.loads(fields["data"]))
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("outbox entry %s is malformed: %s", entry_id, exc)
        return Entry(entry_id=entry_id, message=None, raw=fields, lane="malformed")
    t = message.thread
    return Entry(
        entry_id=entry_id, message=message, raw=fields, lane=f"{t.platform}|{t.chat}|{t.thread}"
    )


class Egress:
    """Consumes ``{prefix}outbox`` and sends through the adapters.

    Args:
        redis: Async client with ``decode_responses=True``.
        keys: Key builder.
        adapters: Adapter per platform name.
        settings: Retry budget, backoff, reclaim idle time.
        consumer: This gateway's consumer name (unique per process).
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: Keys,
        adapters: Mapping[str, ChannelAdapter],
        settings: GatewaySettings,
        consumer: str,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.adapters = adapters
        self.settings = settings
        self.consumer = consumer
        self._lanes: dict[str, asyncio.Queue[Entry]] = {}
        self._lane_tasks: dict[str, asyncio.Task[None]] = {}
        self._queued: set[str] = set()
        self.delivered_count = 0

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.keys.outbox, GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def run(self) -> None:
        """Read, reclaim and dispatch until cancelled; survives Redis restarts."""
        last_reclaim = 0.0
        while True:
            try:
                await self.ensure_group()
                if time.monotonic() - last_reclaim > self.settings.reclaim_idle_seconds / 3:
                    last_reclaim = time.monotonic()
                    await self._reclaim()
                await self._read_new()
            except asyncio.CancelledError:
                raise
            except (aioredis.ConnectionError, aioredis.TimeoutError, OSError) as exc:
                reraise_if_cancelling()
                log.warning("egress lost Redis (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _read_new(self) -> None:
        replies: Any = await self.redis.xreadgroup(
            GROUP, self.consumer, {self.keys.outbox: ">"}, count=100, block=1000
        )
        for _stream, entries in replies or []:
            for entry_id, fields in entries:
                self._dispatch(parse_entry(entry_id, fields))

    async def _reclaim(self) -> None:
        """Take over entries another (dead) gateway read but never acknowledged."""
        idle_ms = int(self.settings.reclaim_idle_seconds * 1000)
        start = "0-0"
        while True:
            result = await self.redis.xautoclaim(
                self.keys.outbox, GROUP, self.consumer, idle_ms, start_id=start, count=100
            )
            start, entries = result[0], result[1]
            for entry_id, fields in entries:
                if fields:
                    self._dispatch(parse_entry(entry_id, fields))
                else:  # trimmed away under us: nothing to deliver
                    await self.redis.xack(self.keys.outbox, GROUP, entry_id)
            if start in ("0-0", b"0-0"):
                return

    def _dispatch(self, entry: Entry) -> None:
        if entry.entry_id in self._queued:
            return
        self._queued.add(entry.entry_id)
        lane = self._lanes.get(entry.lane)
        if lane is None:
            lane = self._lanes[entry.lane] = asyncio.Queue()
            self._lane_tasks[entry.lane] = asyncio.create_task(self._drain(entry.lane, lane))
        lane.put_nowait(entry)

    async def _drain(self, name: str, lane: asyncio.Queue[Entry]) -> None:
        while True:
            entry = await lane.get()
            try:
                await self._deliver(entry)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one entry kill the lane; it stays pending
                reraise_if_cancelling()
                log.exception("delivery of %s crashed; it will be reclaimed", entry.entry_id)
            finally:
                self._queued.discard(entry.entry_id)

    async def _deliver(self, entry: Entry) -> None:
        message = entry.message
        if message is None:
            await self._dead_letter(entry, "malformed entry")
            return
        key = message.idempotency_key or f"entry:{entry.entry_id}"
        if await self.redis.exists(self.keys.delivered(key)):
            await self.redis.xack(self.keys.outbox, GROUP, entry.entry_id)
            return
        if not await self.redis.set(
            self.keys.sending(key), self.consumer, nx=True, px=SENDING_LOCK_MS
        ):
            return  # another gateway is sending it right now; reclaim will look again
        try:
            await self._send_with_retries(entry, message, key)
        finally:
            await self.redis.delete(self.keys.sending(key))

    async def _send_with_retries(self, entry: Entry, message: Outbound, key: str) -> None:
        adapter = self.adapters.get(message.thread.platform)
        if adapter is None:
            await self._dead_letter(entry, f"no adapter for platform {message.thread.platform!r}")
            return
        s = self.settings
        for attempt in range(1, s.delivery_attempts + 1):
            try:
                ids = await adapter.send(message)
            except DeliveryError as exc:
                error = exc
            except Exception as exc:  # an adapter bug or network error: retry like a 5xx
                log.warning("adapter %s raised %s", adapter.platform, type(exc).__name__)
                error = DeliveryError(f"{type(exc).__name__}: {exc}")
            else:
                await self._mark_delivered(entry, key, ids)
                return
            if error.permanent or attempt == s.delivery_attempts:
                await self._dead_letter(entry, f"{error} (after {attempt} attempt(s))")
                return
            wait = error.retry_after
            if wait is None:
                wait = backoff(
                    attempt, base=s.delivery_backoff_seconds, cap=s.delivery_backoff_max_seconds
                )
            log.info("send of %s failed (%s); retry %d in %.1fs", key, error, attempt, wait)
            await asyncio.sleep(min(wait, s.delivery_backoff_max_seconds * 5))

    async def _mark_delivered(self, entry: Entry, key: str, ids: list[str]) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.delivered(key), json.dumps(ids), ex=DELIVERED_TTL)
            pipe.xack(self.keys.outbox, GROUP, entry.entry_id)
            await pipe.execute()
        self.delivered_count += 1

    async def _dead_letter(self, entry: Entry, reason: str) -> None:
        log.error("outbox entry %s dead-lettered: %s", entry.entry_id, reason)
        fields: dict[Any, Any] = {**entry.raw, "reason": reason, "entry_id": entry.entry_id}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.keys.dead_letter, fields, maxlen=100_000, approximate=True)
            pipe.xack(self.keys.outbox, GROUP, entry.entry_id)
            await pipe.execute()

    async def drained(self) -> bool:
        """True when every entry written so far has been read and acknowledged."""
        info = await self.redis.xinfo_groups(self.keys.outbox)
        group = next((g for g in info if g["name"] == GROUP), None)
        if group is None:
            return False
        stream = await self.redis.xinfo_stream(self.keys.outbox)
        return bool(
            group["pending"] == 0 and group["last-delivered-id"] == stream["last-generated-id"]
        )

    async def close(self) -> None:
        await cancel_all(list(self._lane_tasks.values()))
        self._lane_tasks.clear()
        self._lanes.clear()
