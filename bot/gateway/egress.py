"""Egress: read the outbox stream and hand each entry to its thread's lane.

A consumer group spreads entries over gateways; each thread's entries go through one
:class:`~bot.gateway.lane.Lane`, in order, so one slow or rate-limited thread never holds
up the others. Each entry is settled by :class:`bot.gateway.sender.Deliverer` (observe,
decide, act), which posts a split message part by part and records each part in Redis
before the next, so nothing is posted twice by a retry, a restart or a second gateway; the
lane readies the next entries while one is posted, and posts the next as soon as the one
before it is recorded delivered. Entries that a dead gateway left unacknowledged are
taken over; after a lost Redis connection the entries already handed to this gateway are
read again at once, not after the reclaim timer. Redis structures belong to
:mod:`bot.store.outbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

import redis.asyncio as aioredis

from bot.config import GatewaySettings
from bot.gateway.lane import Lane, Turn
from bot.gateway.sender import (
    REDIS_ERRORS,
    Deliverer,
    Entry,
    lane_of,
    parse_entry,
    reraise_if_cancelling,
)
from bot.supervise.aio import cancel_all
from bot.types import ThreadRef

__all__ = ["Egress", "reraise_if_cancelling"]

log = logging.getLogger(__name__)

LANE_IDLE_SECONDS = 60.0  # a thread's lane task ends after this long without messages
OUTBOX_KEEP_SECONDS = 3600.0  # delivered outbox entries are trimmed after this long
TRIM_EVERY_SECONDS = 60.0
STREAM_GONE = ("NOGROUP", "UNBLOCKED")  # errors of a read whose stream or group was deleted


class Egress:
    """Consumes ``{prefix}outbox`` and sends through the adapters.

    Args:
        sender: Delivers each entry (it holds the outbox, the adapters and this gateway's
            consumer name).
        settings: Reclaim idle time and the liveness TTL.
    """

    def __init__(self, *, sender: Deliverer, settings: GatewaySettings) -> None:
        self.sender = sender
        self.outbox = sender.outbox
        self.consumer = sender.consumer
        self.settings = settings
        self._lanes: dict[str, Lane[Entry]] = {}
        self._lane_tasks: dict[str, asyncio.Task[None]] = {}
        self._queued: set[str] = set()
        self._last_beat = self._last_reclaim = self._last_trim = float("-inf")

    async def ensure_group(self) -> None:
        await self.outbox.ensure_group()

    async def run(self) -> None:
        """Read, reclaim and dispatch until cancelled; survives Redis restarts.

        Before reading anything new it takes over what dead gateways left unacknowledged
        (waiting at most ``alive_ttl_seconds`` for a verdict), so a restart keeps each
        thread's order.
        """
        started = reread = grouped = False
        while True:
            try:
                if not grouped:  # once, and again whenever Redis may have lost the group
                    await self.ensure_group()
                    grouped = True
                await self._beat()
                if not started:
                    await self._take_over_dead(wait=True)
                    started = True
                await self._housekeeping(now=reread)
                reread = False
                self._dispatch_all(await self.outbox.read_new(self.consumer))
            except asyncio.CancelledError:
                raise
            except aioredis.ResponseError as exc:
                if not str(exc).startswith(STREAM_GONE):
                    raise
                grouped = False  # the stream went away (a flushed or emptied Redis)
            except REDIS_ERRORS as exc:
                reraise_if_cancelling()
                log.warning("egress lost Redis (%s); retrying", type(exc).__name__)
                reread, grouped = True, False
                await asyncio.sleep(0.5)

    async def _housekeeping(self, *, now: bool) -> None:
        """Every ``reclaim_idle_seconds / 3`` (at once with ``now``): pick up entries handed
        to this gateway but in no lane (a read whose reply a lost connection swallowed),
        take over dead gateways' entries, reclaim idle ones. Every minute: trim."""
        tick = time.monotonic()
        if now or tick - self._last_reclaim > self.settings.reclaim_idle_seconds / 3:
            self._last_reclaim = tick
            mine = await self.outbox.unacknowledged(self.consumer, besides=self._queued)
            await self._dispatch_claimed([entry_id for entry_id, _ in mine], mine, resumed=True)
            await self._take_over_dead(wait=False)
            await self._reclaim()
        if tick - self._last_trim > TRIM_EVERY_SECONDS:
            self._last_trim = tick
            await self.trim()

    async def _beat(self) -> None:
        ttl = self.settings.alive_ttl_seconds
        if time.monotonic() - self._last_beat < ttl / 3:
            return
        self._last_beat = time.monotonic()
        await self.outbox.beat(self.consumer, ttl=ttl)

    async def _take_over_dead(self, *, wait: bool) -> None:
        """Claim every entry pending with a consumer whose liveness key is gone.

        With ``wait`` a consumer whose key still exists is watched until the key either
        lapses (dead: claim) or is refreshed (a live gateway: leave it alone).
        """
        suspects: dict[str, str] = {}
        for name, pending in await self.outbox.consumers():
            if name == self.consumer:
                continue
            seen = await self.outbox.last_beat(name)
            if seen is None:
                await self._claim_all(name)
            elif pending:
                suspects[name] = seen
        deadline = time.monotonic() + (self.settings.alive_ttl_seconds + 1 if wait else 0)
        while suspects and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            for name, seen in list(suspects.items()):
                now_seen = await self.outbox.last_beat(name)
                if now_seen is None:
                    await self._claim_all(name)
                if now_seen != seen:
                    del suspects[name]

    async def _claim_all(self, dead: str) -> None:
        """Move ``dead``'s pending entries to this consumer (in id order), then forget it."""
        while ids := await self.outbox.pending_ids(dead):
            claimed = await self.outbox.claim(self.consumer, ids)
            log.warning("took over %d undelivered entries from gateway %s", len(ids), dead)
            await self._dispatch_claimed(ids, claimed)
        await self.outbox.forget_consumer(dead)

    async def trim(self, *, keep_seconds: float = OUTBOX_KEEP_SECONDS) -> int:
        """Drop outbox entries every group has acknowledged and that are older than
        ``keep_seconds`` (kept that long for inspection); returns how many went."""
        return await self.outbox.trim(keep_seconds=keep_seconds)

    async def _reclaim(self) -> None:
        """Take over entries another (dead) gateway read but never acknowledged."""
        idle_ms = int(self.settings.reclaim_idle_seconds * 1000)
        start = "0-0"
        while True:
            start, entries = await self.outbox.autoclaim(self.consumer, idle_ms, start)
            await self._dispatch_claimed([entry_id for entry_id, _ in entries], entries)
            if start == "0-0":
                return

    async def _dispatch_claimed(
        self, ids: list[Any], entries: Any, *, resumed: bool = False
    ) -> None:
        """Queue claimed entries; acknowledge ids whose entry was trimmed away meanwhile."""
        found = {entry_id for entry_id, fields in entries if fields}
        self._dispatch_all([(i, f) for i, f in entries if f], resumed=resumed)
        for gone in [i for i in ids if i not in found]:  # nothing left to deliver
            await self.outbox.ack(gone)

    def _dispatch_all(self, entries: list[Any], *, resumed: bool = False) -> None:
        for entry_id, fields in entries:
            self._dispatch(parse_entry(entry_id, fields, resumed=resumed))

    def _dispatch(self, entry: Entry) -> None:
        if entry.entry_id in self._queued:
            return
        self._queued.add(entry.entry_id)
        lane = self._lanes.get(entry.lane)
        if lane is None:
            lane = self._lanes[entry.lane] = Lane(
                deliver=self._deliver,
                closing=lambda: self.sender.closing,
                idle_seconds=LANE_IDLE_SECONDS,
                on_idle=functools.partial(self._forget_lane, entry.lane),
            )
            self._lane_tasks[entry.lane] = asyncio.create_task(lane.run())
        lane.put(entry)

    def _forget_lane(self, name: str) -> None:
        del self._lanes[name], self._lane_tasks[name]

    async def _deliver(self, entry: Entry, turn: Turn) -> None:
        try:
            await self.sender.deliver(entry, turn)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let one entry kill the lane; it stays pending
            reraise_if_cancelling()
            log.exception("delivery of %s crashed; it will be reclaimed", entry.entry_id)
        finally:
            turn.release()
            self._queued.discard(entry.entry_id)

    def announcing(self, thread: ThreadRef) -> asyncio.Event | None:
        """``None`` when this gateway has nothing queued or in flight for ``thread``, else
        an event set once it has not (status cards wait for it: announces go first)."""
        lane = self._lanes.get(lane_of(thread))
        return None if lane is None or lane.idle.is_set() else lane.idle

    async def drained(self) -> bool:
        """True when every entry written so far has been read and acknowledged."""
        return await self.outbox.drained()

    async def close(self, *, grace: float = 5.0) -> None:
        """Stop: let sends in flight finish (up to ``grace`` s), then hand over the rest.

        Entries read but not sent stay pending; dropping the liveness key lets the next
        gateway take them over at once instead of after ``alive_ttl_seconds``.
        """
        self.sender.stop_starting()
        deadline = time.monotonic() + grace
        while self.sender.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await cancel_all(list(self._lane_tasks.values()))
        self._lane_tasks.clear()
        self._lanes.clear()
        with contextlib.suppress(aioredis.RedisError, OSError):
            await self.outbox.retire(self.consumer)
