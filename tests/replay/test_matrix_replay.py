"""Real Matrix events (tests/replay/corpus/matrix) replayed through the sync loop of a gateway.

One gateway for the module: the real Matrix adapter (its nio client) syncs from
:class:`bot.testing.fake_matrix.FakeMatrix`, which serves every case in a room of its own (a
DM of the sender and the bot when the case says ``"dm": true``, else a room of three), in
one sync batch, and every case again in the next batch, as a homeserver redelivers after a
restart. No workers: a turn is the job the gateway queued in Redis (and the typing notice
it sent), so each case checks exactly one turn job in the expected room and thread, or no
job and nothing sent to its room.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from adapters.matrix import MatrixChannel
from bot.config import MatrixSettings
from bot.redis.server import RedisServer
from bot.store.jobs import TurnJob
from bot.testing.fake_matrix import FakeMatrix
from bot.testing.stack import Stack
from bot.testing.wait import until
from tests.replay.corpus import Case, load

BOT = "@fanbot:example.org"
PASSWORD = "replay-password"
THIRD = "@carol:example.org"
CASES = load("matrix")


@dataclass
class Seen:
    """What the gateway did for one case's room."""

    turns: list[TurnJob] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    typing: int = 0


@dataclass
class Replay:
    """What the gateway did per room, and every failure it logged with a traceback."""

    rooms: dict[str, Seen]
    crashes: list[str]


class Crashes(logging.Handler):
    """Log records with a traceback or at ERROR: a conversion or an ingress that failed
    (the adapter drops such an event with a warning, which would look like "ignored")."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            kind = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
            self.found.append(f"{record.name}: {record.getMessage()} {kind}".strip())


def room_of(index: int) -> str:
    return f"!replay-{index:03d}:example.org"


def members(case: Case) -> list[str]:
    sender = case.payload.get("sender")
    person = sender if isinstance(sender, str) and sender != BOT else "@alice:example.org"
    return [person] if case.expect.get("dm") else [person, THIRD]


def timeline_event(case: Case) -> dict[str, Any]:
    event = json.loads(json.dumps(case.payload))
    event.pop("room_id", None)  # a /sync timeline event has none
    return dict(event)


def queued_turns(url: str) -> list[TurnJob]:
    client = redis.Redis.from_url(url)
    try:
        ids = sorted(k.decode().removeprefix("rq:job:") for k in client.scan_iter("rq:job:turn-*"))
        jobs = [Job.fetch(i, connection=client, serializer=JSONSerializer) for i in ids]
        return [TurnJob(**job.args[0]) for job in jobs]
    finally:
        client.close()


async def replay(url: str, store: Path) -> Replay:
    crashes = Crashes()
    logging.getLogger().addHandler(crashes)
    try:
        rooms = await replay_rooms(url, store)
    finally:
        logging.getLogger().removeHandler(crashes)
    return Replay(rooms=rooms, crashes=crashes.found)


async def replay_rooms(url: str, store: Path) -> dict[str, Seen]:
    async with FakeMatrix(user_id=BOT, password=PASSWORD) as hs:
        for index, case in enumerate(CASES):
            hs.add_room(room_of(index), members=members(case))
        settings = MatrixSettings(
            homeserver=hs.url, user_id=BOT, password=PASSWORD, sync_timeout_ms=1_000
        )
        channel = MatrixChannel(settings=settings, store_path=store)
        values = {
            "redis_url": url,
            "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "fake-model"},
            "matrix": settings.model_dump(mode="json", exclude_none=True) | {"password": PASSWORD},
            # Many cases share a sender: the messages-per-minute limits are not under test.
            "limits": {"messages_per_minute_per_user": 0, "messages_per_minute_per_thread": 0},
        }
        async with Stack(values=values, adapters=[channel], workers=0) as stack:
            await until(lambda: hs.syncs, timeout=30)  # the first sync: history, skipped
            batch = {room_of(i): [timeline_event(c)] for i, c in enumerate(CASES)}
            hs.deliver_batch(batch)
            hs.deliver_batch(batch)  # every event again: a redelivery
            # A sync since s2 means both batches were taken (the token is saved only then).
            await until(lambda: hs.synced_to >= 2, timeout=45)
            gateway = stack.gateway
            assert gateway is not None
            await stack.wait_for(gateway.egress.drained, timeout=30)  # whatever it answered, sent
        seen = {room_of(i): Seen() for i in range(len(CASES))}
        for job in queued_turns(url):
            seen[job.thread["chat"]].turns.append(job)
        for sent in hs.sent:
            seen[sent.room_id].sent.append({"type": sent.type, "content": sent.content})
        for room_id, count in Counter(hs.typing).items():
            seen[room_id].typing = count
        return seen


@pytest.fixture(scope="module")
def replayed(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Replay:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    store = tmp_path_factory.mktemp("matrix-replay")
    return asyncio.run(replay(redis_server.url, store))


def test_the_corpus_has_over_a_hundred_distinct_real_events() -> None:
    assert len(CASES) >= 110
    assert len({c.id for c in CASES}) == len(CASES)
    ids = [c.payload.get("event_id") for c in CASES if "event_id" in c.payload]
    assert len(ids) == len(set(ids))  # the gateway dedupes by event id
    for case in CASES:
        assert case.kind == "event"
        assert case.outcome == "ignore" or "thread" in case.expect, case.id


def test_no_event_failed_in_the_adapter_or_the_gateway(replayed: Replay) -> None:
    assert replayed.crashes == []


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.id for c in CASES])
def test_replayed_event(replayed: Replay, index: int) -> None:
    case, room = CASES[index], room_of(index)
    seen = replayed.rooms[room]
    event_id = case.payload.get("event_id")
    if isinstance(event_id, str):
        assert [c for c in replayed.crashes if event_id in c] == [], f"{case.id}: it failed"
    if case.outcome == "ignore":
        assert seen.turns == [], f"{case.id}: a turn for an ignored event"
        assert seen.sent == [] and seen.typing == 0, f"{case.id}: the bot answered"
        return
    [turn] = seen.turns  # exactly one, although the event came twice
    assert turn.message_id == case.payload["event_id"]
    assert turn.platform == "matrix"
    assert turn.thread["chat"] == room
    assert turn.thread["thread"] == case.expect["thread"]
    assert turn.is_dm == bool(case.expect.get("dm"))
    if "text" in case.expect:
        assert turn.text == case.expect["text"]
    assert seen.typing == 1  # shown once: the redelivery was a duplicate
    assert seen.sent == []  # no workers: nothing answers yet
