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
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from bot import failpoints
from bot.config import GatewaySettings
from bot.errors import DeliveryError
from bot.keys import Keys
from bot.ports import ChannelAdapter
from bot.types import Outbound

log = logging.getLogger(__name__)

GROUP = "gateway"
DELIVERED_TTL = 7 * 86_400
SENDING_LOCK_SECONDS = 30.0  # renewed while a send (with its retries) is in progress
_DELETE_IF_EQUAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
LANE_IDLE_SECONDS = 60.0  # a thread's lane task ends after this long without messages
OUTBOX_KEEP_SECONDS = 3600.0  # delivered outbox entries are trimmed after this long
TRIM_EVERY_SECONDS = 60.0
RETRY_AFTER_CEILING = 900.0  # a platform's Retry-After is honoured up to this


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


def _stream_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    return int(ms), int(seq or 0)


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
        self._sends_in_flight = 0
        self._closing = False
        self._last_beat = float("-inf")
        self.delivered_count = 0

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.keys.outbox, GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def run(self) -> None:
        """Read, reclaim and dispatch until cancelled; survives Redis restarts.

        Before reading anything new it takes over what dead gateways left unacknowledged
        (waiting at most ``alive_ttl_seconds`` for a verdict), so a restart keeps each
        thread's order.
        """
        last_reclaim = last_trim = 0.0
        started = False
        while True:
            try:
                await self.ensure_group()
                await self._beat()
                if not started:
                    await self._take_over_dead(wait=True)
                    started = True
                if time.monotonic() - last_reclaim > self.settings.reclaim_idle_seconds / 3:
                    last_reclaim = time.monotonic()
                    await self._take_over_dead(wait=False)
                    await self._reclaim()
                if time.monotonic() - last_trim > TRIM_EVERY_SECONDS:
                    last_trim = time.monotonic()
                    await self.trim()
                await self._read_new()
            except asyncio.CancelledError:
                raise
            except (aioredis.ConnectionError, aioredis.TimeoutError, OSError) as exc:
                reraise_if_cancelling()
                log.warning("egress lost Redis (%s); retrying", type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _beat(self) -> None:
        """Refresh this gateway's liveness key (it lapses ``alive_ttl_seconds`` after a crash)."""
        ttl = self.settings.alive_ttl_seconds
        now = time.monotonic()
        if now - self._last_beat < ttl / 3:
            return
        self._last_beat = now
        await self.redis.set(
            self.keys.gateway_alive(self.consumer), f"{time.time():.3f}", px=int(ttl * 1000)
        )

    async def _take_over_dead(self, *, wait: bool) -> None:
        """Claim every entry pending with a consumer whose liveness key is gone.

        With ``wait`` a consumer whose key still exists is watched until the key either
        lapses (dead: claim) or is refreshed (a live gateway: leave it alone).
        """
        consumers: Any = await self.redis.xinfo_consumers(self.keys.outbox, GROUP)
        suspects: dict[str, Any] = {}
        for consumer in consumers:
            name = consumer["name"]
            if name == self.consumer:
                continue
            seen = await self.redis.get(self.keys.gateway_alive(name))
            if seen is None:
                await self._claim_all(name)
            elif consumer["pending"]:
                suspects[name] = seen
        deadline = time.monotonic() + (self.settings.alive_ttl_seconds + 1 if wait else 0)
        while suspects and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            for name, seen in list(suspects.items()):
                now_seen = await self.redis.get(self.keys.gateway_alive(name))
                if now_seen is None:
                    await self._claim_all(name)
                if now_seen != seen:
                    del suspects[name]

    async def _claim_all(self, dead: str) -> None:
        """Move ``dead``'s pending entries to this consumer (in id order), then forget it."""
        while True:
            pending: Any = await self.redis.xpending_range(
                self.keys.outbox, GROUP, min="-", max="+", count=100, consumername=dead
            )
            if not pending:
                break
            ids: list[Any] = [p["message_id"] for p in pending]
            claimed: Any = await self.redis.xclaim(
                self.keys.outbox, GROUP, self.consumer, min_idle_time=0, message_ids=ids
            )
            log.warning("took over %d undelivered entries from gateway %s", len(ids), dead)
            await self._dispatch_claimed(ids, claimed)
        await self.redis.xgroup_delconsumer(self.keys.outbox, GROUP, dead)

    async def _read_new(self) -> None:
        replies: Any = await self.redis.xreadgroup(
            GROUP, self.consumer, {self.keys.outbox: ">"}, count=100, block=1000
        )
        for _stream, entries in replies or []:
            for entry_id, fields in entries:
                self._dispatch(parse_entry(entry_id, fields))

    async def trim(self, *, keep_seconds: float = OUTBOX_KEEP_SECONDS) -> int:
        """Drop outbox entries every group has acknowledged and that are older than
        ``keep_seconds`` (kept that long for inspection); returns how many went."""
        floor = f"{int((time.time() - keep_seconds) * 1000)}-0"
        groups: Any = await self.redis.xinfo_groups(self.keys.outbox)
        for group in groups:
            summary: Any = await self.redis.xpending(self.keys.outbox, group["name"])
            low = summary["min"] if summary["pending"] else group["last-delivered-id"]
            if _stream_id(low) < _stream_id(floor):
                floor = low  # never past an entry someone has not acknowledged
        if not groups:
            return 0
        return int(await self.redis.xtrim(self.keys.outbox, minid=floor, approximate=False))

    async def _reclaim(self) -> None:
        """Take over entries another (dead) gateway read but never acknowledged."""
        idle_ms = int(self.settings.reclaim_idle_seconds * 1000)
        start = "0-0"
        while True:
            result = await self.redis.xautoclaim(
                self.keys.outbox, GROUP, self.consumer, idle_ms, start_id=start, count=100
            )
            start, entries = result[0], result[1]
            await self._dispatch_claimed([entry_id for entry_id, _ in entries], entries)
            if start in ("0-0", b"0-0"):
                return

    async def _dispatch_claimed(self, ids: list[Any], entries: Any) -> None:
        """Queue claimed entries; acknowledge ids whose entry was trimmed away meanwhile."""
        found = set()
        for entry_id, fields in entries:
            if fields:
                found.add(entry_id)
                self._dispatch(parse_entry(entry_id, fields))
        for gone in [i for i in ids if i not in found]:  # nothing left to deliver
            await self.redis.xack(self.keys.outbox, GROUP, gone)

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
        while not self._closing:
            try:
                entry = await asyncio.wait_for(lane.get(), LANE_IDLE_SECONDS)
            except TimeoutError:
                if lane.empty():  # no await between this check and the removal
                    del self._lanes[name], self._lane_tasks[name]
                    return
                continue
            if self._closing:  # left pending; the next gateway takes it over
                return
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
        while not self._closing:  # the lane waits here, so the thread's order holds
            if await self.redis.exists(self.keys.delivered(key)):
                await self.redis.xack(self.keys.outbox, GROUP, entry.entry_id)
                return
            async with self._sending(key) as mine:
                if mine:
                    if await self._still_pending(entry.entry_id):
                        await self._send_with_retries(entry, message, key)
                    return
            # Another gateway is sending it: wait for it, unless that gateway is dead.
            await self._break_dead_lock(key)
            await asyncio.sleep(0.25)

    async def _still_pending(self, entry_id: str) -> bool:
        """False once any gateway acknowledged the entry (delivered or dead-lettered)."""
        found: Any = await self.redis.xpending_range(
            self.keys.outbox, GROUP, min=entry_id, max=entry_id, count=1
        )
        return bool(found)

    async def _break_dead_lock(self, key: str) -> None:
        """Drop a sending lock whose holder's liveness key lapsed (it crashed mid-send)."""
        lock_key = self.keys.sending(key)
        holder: Any = await self.redis.get(lock_key)  # decode_responses: a str
        if holder is None or holder == self.consumer:
            return
        if not await self.redis.exists(self.keys.gateway_alive(holder)):
            await self.redis.eval(_DELETE_IF_EQUAL, 1, lock_key, holder)
            log.warning("gateway %s died while sending %s; taking over", holder, key)

    @contextlib.asynccontextmanager
    async def _sending(self, key: str) -> AsyncIterator[bool]:
        """Hold the per-message sending lock, renewed while held; it lapses soon after a crash."""
        lock = self.redis.lock(self.keys.sending(key), timeout=SENDING_LOCK_SECONDS)
        if not await lock.acquire(blocking=False, token=self.consumer):
            yield False
            return

        async def renew() -> None:
            while True:
                await asyncio.sleep(SENDING_LOCK_SECONDS / 3)
                try:
                    await lock.reacquire()
                except aioredis.RedisError as exc:  # lapsed or Redis away: the send goes on
                    reraise_if_cancelling()
                    log.warning("sending lock for %s not renewed: %s", key, exc)

        renewal = asyncio.create_task(renew())
        try:
            yield True
        finally:
            await cancel_all([renewal])
            with contextlib.suppress(aioredis.RedisError):
                await lock.release()

    async def _send_with_retries(self, entry: Entry, message: Outbound, key: str) -> None:
        adapter = self.adapters.get(message.thread.platform)
        if adapter is None:
            await self._dead_letter(entry, f"no adapter for platform {message.thread.platform!r}")
            return
        s = self.settings
        for attempt in range(1, s.delivery_attempts + 1):
            failpoints.hit("egress.before_send")
            self._sends_in_flight += 1  # a graceful stop waits for send + record
            try:
                result = await self._try_send(adapter, message)
                if not isinstance(result, DeliveryError):
                    failpoints.hit("egress.after_send")
                    await self._mark_delivered(entry, key, result)
                    return
            finally:
                self._sends_in_flight -= 1
            error = result
            if error.permanent or attempt == s.delivery_attempts:
                await self._dead_letter(entry, f"{error} (after {attempt} attempt(s))")
                return
            wait = error.retry_after
            if wait is None:
                wait = backoff(
                    attempt, base=s.delivery_backoff_seconds, cap=s.delivery_backoff_max_seconds
                )
            log.info("send of %s failed (%s); retry %d in %.1fs", key, error, attempt, wait)
            await asyncio.sleep(min(wait, RETRY_AFTER_CEILING))

    @staticmethod
    async def _try_send(adapter: ChannelAdapter, message: Outbound) -> list[str] | DeliveryError:
        try:
            return await adapter.send(message)
        except DeliveryError as exc:
            return exc
        except Exception as exc:  # an adapter bug or network error: retry like a 5xx
            log.warning("adapter %s raised %s", adapter.platform, type(exc).__name__)
            return DeliveryError(f"{type(exc).__name__}: {exc}")

    async def _mark_delivered(self, entry: Entry, key: str, ids: list[str]) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.delivered(key), json.dumps(ids), ex=DELIVERED_TTL)
            pipe.xack(self.keys.outbox, GROUP, entry.entry_id)
            await pipe.execute()
        self.delivered_count += 1

    async def _dead_letter(self, entry: Entry, reason: str) -> None:
        what = "malformed entry"
        if entry.message is not None:
            m = entry.message
            what = f"{m.kind.value} {m.idempotency_key or '-'} to {entry.lane}"
        log.error("outbox entry %s (%s) dead-lettered: %s", entry.entry_id, what, reason)
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

    async def close(self, *, grace: float = 5.0) -> None:
        """Stop: let sends in flight finish (up to ``grace`` s), then hand over the rest.

        Entries read but not sent stay pending; dropping the liveness key lets the next
        gateway take them over at once instead of after ``alive_ttl_seconds``.
        """
        self._closing = True
        deadline = time.monotonic() + grace
        while self._sends_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await cancel_all(list(self._lane_tasks.values()))
        self._lane_tasks.clear()
        self._lanes.clear()
        with contextlib.suppress(aioredis.RedisError, OSError):
            await self.redis.delete(self.keys.gateway_alive(self.consumer))
