"""Settle one outbox entry: observe, decide (:mod:`bot.gateway.delivery`), act, repeat.

The adapter posts a split message part by part; each part's platform id is recorded in
Redis before the next part goes out, so whoever sends the entry next (a retry, a restarted
or another gateway) resumes after the last part posted. The one part that can be in doubt
(posted, then the gateway died before recording it) is settled by the adapter as the
platform allows (see :mod:`bot.ports`).

Failpoints (:mod:`bot.failpoints`) mark the instants a fault test can kill the gateway at:
``egress.before_send``; ``egress.after_send`` (the platform took a part, Redis has not
recorded it: the part in doubt); ``egress.between_parts`` (a part recorded, the next not
posted); ``egress.before_ack`` (every part recorded; no delivered marker, no ack yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import mimetypes
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

import redis.asyncio as aioredis

from bot.errors import DeliveryError
from bot.failpoints import Failpoints
from bot.gateway import delivery as d
from bot.gateway.lane import Turn
from bot.gateway.thread_opener import ThreadOpenings
from bot.observe import metric_defs as catalog
from bot.observe.gateway import GatewayObserver, delivered_updates, observed_delivery
from bot.ports import FileChannel, OutboundChannel, OutFile, PartLog
from bot.store.metrics import Update
from bot.store.outbox import EntryState, Outbox, entry_time
from bot.supervise.aio import cancel_all
from bot.types import Outbound, OutboundKind, ThreadRef

# Delivery log lines keep the logger name they always had: operators filter on it.
log = logging.getLogger("bot.gateway.egress")

SENDING_LOCK_SECONDS = 30.0  # renewed while a send (with its retries) is in progress
REDIS_RETRY_CAP = 2.0  # longest pause between two tries of a step that lost Redis
REDIS_ERRORS = (aioredis.ConnectionError, aioredis.TimeoutError, OSError)
T = TypeVar("T")
FileLoader = Callable[[str, str], Awaitable[bytes | None]]


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One outbox entry as read from the stream (``message`` is ``None`` if malformed)."""

    entry_id: str
    message: Outbound | None
    raw: Mapping[str, str]
    lane: str
    resumed: bool = False  # found unattended in this gateway's pending list: in doubt

    @property
    def key(self) -> str:
        key = self.message.idempotency_key if self.message else ""
        return key or f"entry:{self.entry_id}"

    @property
    def platform(self) -> str:
        return self.message.thread.platform if self.message else ""


def parse_entry(entry_id: str, fields: Mapping[str, str], *, resumed: bool = False) -> Entry:
    try:
        message = Outbound.from_json(json.loads(fields["data"]))
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("outbox entry %s is malformed: %s", entry_id, exc)
        return Entry(entry_id=entry_id, message=None, raw=fields, lane="malformed", resumed=resumed)
    lane = lane_of(message.thread)
    return Entry(entry_id=entry_id, message=message, raw=fields, lane=lane, resumed=resumed)


def lane_of(thread: ThreadRef) -> str:
    """The name of the lane that delivers ``thread``'s messages in order."""
    return f"{thread.platform}|{thread.chat}|{thread.thread}"


def reraise_if_cancelling() -> None:
    """redis-py may turn a cancelled blocking read into ConnectionError; keep the cancel."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


@dataclass(kw_only=True)
class _Progress:
    """What this gateway did with one entry (the decision's input besides Redis)."""

    attempts: int = 0
    sent: tuple[str, ...] | None = None
    failure: d.Failure | None = None
    holding: bool = False
    counted: bool = False
    parent_copy: asyncio.Task[Outbound | None] | None = None  # read while waiting to post


class Deliverer:
    """Delivers entries one at a time per caller (egress runs one per thread lane).

    Args:
        outbox: The outbox store.
        adapters: Adapter per platform name.
        policy: Retry budget and backoff.
        consumer: This gateway's consumer name (also the sending lock's token).

        starting: Platforms whose adapter has not started yet (the gateway retries them);
            their entries wait instead of spending retries.
        files: Reads an attachment's bytes ``(session key, workspace path)``; without it
            attachments are logged and left out.
        threads: Opens thread-bound children's threads (without it, none is opened).
        observer: Counts deliveries, retries and dead letters.
        failpoints: Where a fault test makes this process misbehave (none by default).
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        adapters: Mapping[str, OutboundChannel],
        policy: d.Policy,
        consumer: str,
        starting: Callable[[], Collection[str]] = tuple,
        files: FileLoader | None = None,
        threads: ThreadOpenings | None = None,
        observer: GatewayObserver | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.outbox = outbox
        self.adapters = adapters
        self.policy = policy
        self.consumer = consumer
        self.closing = False
        self.starting = starting
        self.files = files
        self.threads = threads
        self.in_flight = 0  # sends between the first post and the delivered record
        self.observer = observer
        self.failpoints = failpoints or Failpoints()
        self.delivered = 0
        self._keys: dict[str, asyncio.Event] = {}  # keys being settled, set when done

    def stop_starting(self) -> None:
        """Start no send from now on (the gateway closes); those in flight finish."""
        self.closing = True

    @observed_delivery
    async def deliver(self, entry: Entry, turn: Turn | None = None) -> None:
        """Settle ``entry``, posting it once ``turn`` says the entry before it was settled
        (none: at once); when Redis goes away midway, start over as soon as it is back.
        The caller releases ``turn`` when this returns or raises."""
        turn = turn or Turn()
        async with self._only_delivery_of(entry.key):
            pause, resumed = 0.05, entry.resumed
            while not self.closing:
                try:
                    await self._deliver(entry, turn, resumed=resumed)
                    return
                except REDIS_ERRORS as exc:
                    reraise_if_cancelling()
                    log.warning("delivery of %s lost Redis (%s); retrying", entry.key, exc)
                await asyncio.sleep(pause)
                pause, resumed = min(pause * 2, REDIS_RETRY_CAP), True

    @contextlib.asynccontextmanager
    async def _only_delivery_of(self, key: str) -> AsyncIterator[None]:
        """Wait until no other entry with ``key`` is being settled here (the sending lock
        keeps other gateways out, but names the gateway, not the entry): a second entry
        with a key then finds it delivered instead of posting it again."""
        while (other := self._keys.get(key)) is not None:
            await other.wait()
        done = self._keys[key] = asyncio.Event()
        try:
            yield
        finally:
            del self._keys[key]
            done.set()

    async def _deliver(self, entry: Entry, turn: Turn, *, resumed: bool) -> None:
        message, key = entry.message, entry.key
        platform = message.thread.platform if message else ""
        progress = _Progress()
        seen: EntryState | None = None
        async with self._lock_renewed(key, progress):
            while not self.closing:
                # After a send that went through, what Redis said before it still holds:
                # the sending lock kept everyone else away meanwhile.
                snapshot = seen or await self._observe(entry, progress)
                state = d.State(
                    consumer=self.consumer,
                    platform=platform,
                    malformed=message is None,
                    adapter=platform in self.adapters,
                    ready=platform not in self.starting(),
                    snapshot=snapshot,
                    attempts=progress.attempts,
                    sent=progress.sent,
                    failure=progress.failure,
                    resumed=resumed,
                )
                action = d.decide(state, self.policy)
                await self._perform(action, entry, progress, snapshot.parts, turn)
                if isinstance(action, d.SETTLING):
                    return
                seen = snapshot if progress.sent is not None else None

    async def _observe(self, entry: Entry, progress: _Progress) -> EntryState:
        """Read the entry's state, taking its sending lock when it is free (see
        :meth:`Outbox.observe`)."""
        snapshot = await self.outbox.observe(
            entry.entry_id, entry.key, me=self.consumer, lock_seconds=SENDING_LOCK_SECONDS
        )
        progress.holding = snapshot.holder == self.consumer
        return snapshot

    async def _perform(
        self,
        action: d.Action,
        entry: Entry,
        progress: _Progress,
        posted: dict[int, str],
        turn: Turn,
    ) -> None:
        match action:
            case d.Ack():
                await self.outbox.ack(entry.entry_id)
            case d.Lock():
                progress.holding = await self.outbox.lock(
                    entry.key, self.consumer, seconds=SENDING_LOCK_SECONDS
                )
            case d.Wait(seconds=seconds):
                await asyncio.sleep(seconds)
            case d.BreakLock(holder=holder):
                if await self.outbox.unlock(entry.key, holder):
                    log.warning("gateway %s died holding %s; taking over", holder, entry.key)
            case d.Send():
                if progress.parent_copy is None and self.threads and entry.message:
                    progress.parent_copy = asyncio.create_task(
                        self.threads.parent_copy(entry.message)
                    )
                await turn.wait()
                if self.closing or not progress.holding:  # look again before posting
                    return
                await self._send(action, entry, progress, posted)
            case d.Retry(after=after, reason=reason):
                log.info(
                    "send of %s failed (%s); retry %d in %.1fs",
                    entry.key,
                    reason,
                    progress.attempts,
                    after,
                )
                await self._count(catalog.retry(entry.platform))
                await asyncio.sleep(after)
                progress.failure = None
            case d.MarkDelivered(ids=ids):
                copy = await progress.parent_copy if progress.parent_copy else None
                if self.threads is not None and copy is not None:
                    await self.threads.announced(copy)  # before: a crash repeats it
                self.failpoints.hit("egress.before_ack")
                await self.outbox.mark_delivered(
                    entry.entry_id, entry.key, list(ids), holder=self.consumer
                )
                progress.holding = False  # the same script dropped the lock
                turn.release()  # settled: the thread's next entry may post (metrics wait)
                self._uncount(progress)
                self.delivered += 1
                await self._count(delivered_updates(entry.message, entry.entry_id))
            case d.DeadLetter(reason=reason):
                await self._dead_letter(entry, reason)
                await self._count(catalog.dead_letter(entry.platform))

    async def _send(
        self, action: d.Send, entry: Entry, progress: _Progress, posted: dict[int, str]
    ) -> None:
        assert entry.message is not None  # decide() dead-letters malformed entries
        adapter = self.adapters[entry.message.thread.platform]
        parts = PartLog(
            key=entry.key,
            posted=dict(posted),
            in_doubt=action.in_doubt,
            since=entry_time(entry.entry_id),
            recorder=self._recorder(entry.key),
        )
        self.failpoints.hit("egress.before_send")
        progress.attempts += 1
        if not progress.counted:  # a graceful stop waits for send + record
            progress.counted = True
            self.in_flight += 1
        try:
            if entry.message.kind is OutboundKind.OPEN_THREAD:
                sent = await self._open_thread(adapter, entry.message)
            elif entry.message.replaces:
                sent = await self._edit_earlier(adapter, entry.message)
            else:
                sent = await adapter.send(entry.message, parts=parts)
            if entry.message.attachments:
                sent += await self._send_files(adapter, entry.message, parts, first=len(sent))
            progress.sent = tuple(sent)
        except DeliveryError as exc:
            progress.failure = d.Failure(
                reason=str(exc), retry_after=exc.retry_after, permanent=exc.permanent
            )
        except REDIS_ERRORS:
            raise
        except Exception as exc:  # an adapter bug or network error: retry like a 5xx
            log.warning("adapter %s raised %s", adapter.platform, type(exc).__name__)
            progress.failure = d.Failure(reason=f"{type(exc).__name__}: {exc}")
        if progress.failure is not None:
            self._uncount(progress)

    async def _open_thread(self, adapter: OutboundChannel, message: Outbound) -> list[str]:
        if self.threads is None:
            raise DeliveryError("this gateway opens no threads", permanent=True)
        return await self.threads.open(adapter, message)

    async def _edit_earlier(self, adapter: OutboundChannel, message: Outbound) -> list[str]:
        """Edit the first part of the message posted under ``message.replaces``."""
        first = (await self.outbox.posted(message.replaces)).get(0)
        if not first:  # same lane, so normally posted already; else wait for it
            raise DeliveryError("the message it edits is not posted yet", retry_after=1.0)
        await adapter.edit(message.thread, first, message.text)
        return [first]

    async def _send_files(
        self, adapter: OutboundChannel, message: Outbound, parts: PartLog, *, first: int
    ) -> list[str]:
        """Post the attachments not posted yet, each as part ``first + i``; their ids."""
        paths = message.attachments
        for index in parts.todo(first + len(paths)):
            path = paths[index - first]
            file = await self._load(message.workspace, path)
            if file is None or not isinstance(adapter, FileChannel):
                why = "it is gone" if file is None else f"{adapter.platform} takes no files"
                log.warning("attachment %s of %s not posted: %s", path, parts.key, why)
                await parts.record(index, "")
                continue
            key = f"{parts.key}:file:{index}"
            await parts.record(index, await adapter.send_file(message.thread, file, key=key))
        return [i for i in parts.ids(first + len(paths))[first:] if i]

    async def _load(self, session: str, path: str) -> OutFile | None:
        data = None if self.files is None else await self.files(session, path)
        if data is None:
            return None
        name = path.rsplit("/", 1)[-1]
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return OutFile(name=name, content_type=kind, data=data)

    def _recorder(self, key: str) -> Callable[[int, str], Awaitable[None]]:
        async def record(index: int, message_id: str) -> None:
            self.failpoints.hit("egress.after_send")  # posted, not recorded: the part in doubt
            await self._until_recorded(lambda: self.outbox.record_part(key, index, message_id))
            self.failpoints.hit("egress.between_parts")

        return record

    async def _until_recorded(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` until Redis takes it: a part the platform accepted must be recorded."""
        pause = 0.05
        while True:
            try:
                return await step()
            except REDIS_ERRORS as exc:
                reraise_if_cancelling()
                if self.closing:
                    raise
                log.warning("recording a posted part lost Redis (%s); retrying", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, REDIS_RETRY_CAP)

    async def _count(self, updates: list[Update]) -> None:
        if self.observer is not None:
            await self.observer.add(updates)

    def _uncount(self, progress: _Progress) -> None:
        if progress.counted:
            progress.counted = False
            self.in_flight -= 1

    @contextlib.asynccontextmanager
    async def _lock_renewed(self, key: str, progress: _Progress) -> AsyncIterator[None]:
        """Renew the sending lock while held; release it at the end (it lapses after a crash)."""

        async def renew() -> None:
            while True:
                await asyncio.sleep(SENDING_LOCK_SECONDS / 3)
                try:
                    if progress.holding and not await self.outbox.lock(
                        key, self.consumer, seconds=SENDING_LOCK_SECONDS
                    ):
                        progress.holding = False  # a send not started yet looks again
                        log.warning("sending lock for %s was lost", key)
                except (aioredis.RedisError, OSError) as exc:  # Redis away: the send goes on
                    reraise_if_cancelling()
                    log.warning("sending lock for %s not renewed: %s", key, exc)

        renewal = asyncio.create_task(renew())
        try:
            yield
        finally:
            self._uncount(progress)
            await cancel_all([renewal])
            if progress.parent_copy is not None:  # not needed after all (settled otherwise)
                await cancel_all([progress.parent_copy])
                if not progress.parent_copy.cancelled():
                    progress.parent_copy.exception()  # read, so it is never logged as lost
            if progress.holding:
                with contextlib.suppress(aioredis.RedisError, OSError):
                    await self.outbox.unlock(key, self.consumer)

    async def _dead_letter(self, entry: Entry, reason: str) -> None:
        what = "malformed entry"
        if entry.message is not None:
            m = entry.message
            what = f"{m.kind.value} {m.idempotency_key or '-'} to {entry.lane}"
        log.error("outbox entry %s (%s) dead-lettered: %s", entry.entry_id, what, reason)
        await self.outbox.dead_letter(entry.entry_id, entry.raw, reason)
