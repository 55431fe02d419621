"""Replay real Telegram updates (tests/replay/corpus/telegram) through a running gateway.

Each mode gets one gateway per module (no workers: a turn is the job the gateway enqueues)
and the whole corpus at once, every update twice (a redelivery):

* webhook: each update POSTed to the gateway's webhook route with the secret, twice;
* polling: the fake Bot API's ``getUpdates`` serves each update twice in a row (same
  ``update_id``; ids are renumbered in corpus order because Telegram's only grow).

Then each case is its own test, checked against what the gateway did: the HTTP statuses,
the turn jobs it enqueued in Redis (exactly one, in the expected chat and topic, or none),
what it put in the outbox for that update, and what the fake Bot API was sent
(``answerCallbackQuery`` for a button press). Updates are matched to what they caused by
the event id the adapter gives them (docs/architecture.md: ``chat:message``, an edit's
``:edit:<date>``, a button press's ``callback:<query id>``). Message limits are off: a
corpus sends many messages per person in one burst.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from aiohttp import ClientSession
from rq.job import Job
from rq.serializers import JSONSerializer

from adapters.telegram import build
from adapters.telegram.channel import SECRET_HEADER
from bot.config import Settings
from bot.redis.server import RedisServer
from bot.testing.fake_telegram import CallbackAnswer, FakeTelegram
from bot.testing.netutil import LOOPBACK
from bot.testing.stack import Stack
from bot.types import Outbound
from tests.replay.corpus import Case, load

CASES = load("telegram")
SECRET = "replay-secret_31"
MODES = ("webhook", "polling")
FIRST_UPDATE = 500_000


def event_ids(payload: dict[str, Any]) -> set[str]:
    """The event ids an update's Inbound would carry (see the module docstring)."""
    ids = set()
    for kind, obj in payload.items():
        if not isinstance(obj, dict):
            continue
        if kind == "callback_query":
            ids.add(f"callback:{obj.get('id')}")
        elif isinstance(obj.get("chat"), dict) and "message_id" in obj:
            base = f"{obj['chat'].get('id')}:{obj['message_id']}"
            edited = kind.startswith("edited_")
            ids.add(f"{base}:edit:{obj.get('edit_date') or 0}" if edited else base)
    return ids


def query_id(payload: dict[str, Any]) -> str | None:
    query = payload.get("callback_query")
    return str(query.get("id")) if isinstance(query, dict) else None


@dataclass
class Seen:
    """What the gateway did with one case's update (both deliveries)."""

    statuses: list[int] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    outbox: list[Outbound] = field(default_factory=list)
    answers: list[CallbackAnswer] = field(default_factory=list)


@dataclass
class Replay:
    seen: dict[str, Seen]
    sent_messages: int
    outbox_posts: int
    unclaimed: list[str]


def values_for(tg: FakeTelegram, redis_url: str, mode: str, port: int) -> dict[str, Any]:
    telegram: dict[str, Any] = {
        "bot_token": tg.token, "api_url": tg.api_url, "file_url": tg.file_url,
        "poll_timeout_seconds": 1,
    }  # fmt: skip
    if mode == "webhook":
        telegram |= {"webhook_url": f"http://{LOOPBACK}:{port or 9}/telegram/webhook",
                     "webhook_secret": SECRET}  # fmt: skip
    return {
        "redis_url": redis_url,
        "openai": {"base_url": f"http://{LOOPBACK}:9/v1", "model": "fake-model"},
        "telegram": telegram,
        "limits": {"messages_per_minute_per_user": 0, "messages_per_minute_per_thread": 0},
        "gateway": {"http_host": LOOPBACK, "http_port": port},
    }


def payloads() -> list[dict[str, Any]]:
    """Each case's update with its corpus update id replaced (polling needs them growing)."""
    return [
        {**copy.deepcopy(c.payload), "update_id": FIRST_UPDATE + i} for i, c in enumerate(CASES)
    ]


async def replay(mode: str, redis_url: str) -> Replay:
    port = 0  # the gateway binds a free port itself (no race with other tests for one)
    seen = {c.id: Seen() for c in CASES}
    updates = payloads()
    async with FakeTelegram() as tg:
        values = values_for(tg, redis_url, mode, port)
        if mode == "polling":
            for update in updates:
                tg.push(copy.deepcopy(update))
                tg.push(copy.deepcopy(update))  # the redelivery
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=0) as stack:
            gateway = stack.gateway
            assert gateway is not None
            if mode == "webhook":
                url = f"http://{LOOPBACK}:{gateway.http_port}/telegram/webhook"
                async with ClientSession() as http:
                    for case, update in zip(CASES, updates, strict=True):
                        tg.know(update)
                        for _ in range(2):
                            async with http.post(
                                url, json=update, headers={SECRET_HEADER: SECRET}
                            ) as resp:
                                seen[case.id].statuses.append(resp.status)
            else:
                await stack.wait_for(lambda: tg.pending_updates == [], timeout=60)
            await stack.wait_for(gateway.egress.drained, timeout=60)
            outbox_key = gateway.deps.outbox.keys.outbox
        return collect(seen, tg, redis_url, outbox_key)


def collect(seen: dict[str, Seen], tg: FakeTelegram, redis_url: str, outbox_key: str) -> Replay:
    by_event: dict[str, str] = {}
    by_query: dict[str, str] = {}
    for case in CASES:
        for event in event_ids(case.payload):
            by_event[event] = case.id
        if (query := query_id(case.payload)) is not None:
            by_query[query] = case.id
    unclaimed: list[str] = []
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter("rq:job:*"):
            if key.count(b":") != 2 or client.hget(key, "origin") != b"turns":
                continue
            job_id = key.decode().rsplit(":", 1)[1]
            job = Job.fetch(job_id, connection=client, serializer=JSONSerializer)
            payload = job.args[0]
            owner = by_event.get(payload["message_id"])
            if owner is None:
                unclaimed.append(f"turn {payload['message_id']}")
            else:
                seen[owner].turns.append(payload)
        posts = 0
        entries: Any = client.xrange(outbox_key)
        for _, fields in entries:
            message = Outbound.from_json(json.loads(fields[b"data"]))
            posts += not message.callback
            owner = by_event.get(message.idempotency_key.split(":", 2)[-1])
            if owner is None:
                unclaimed.append(f"outbox {message.idempotency_key}")
            else:
                seen[owner].outbox.append(message)
    finally:
        client.close()
    for answer in tg.callback_answers:
        owner = by_query.get(answer.callback_query_id)
        if owner is None:
            unclaimed.append(f"answer {answer.callback_query_id}")
        else:
            seen[owner].answers.append(answer)
    return Replay(
        seen=seen, sent_messages=len(tg.messages), outbox_posts=posts, unclaimed=unclaimed
    )


@pytest.fixture(scope="module")
def replays(redis_server: RedisServer) -> Iterator[dict[str, Replay]]:
    """Both modes replayed once for the module (a sync fixture: one event loop per mode)."""
    done = {}
    for mode in MODES:
        client = redis.Redis.from_url(redis_server.url)
        client.flushall()
        client.close()
        done[mode] = asyncio.run(replay(mode, redis_server.url))
    yield done


def test_the_corpus_is_big_and_varied() -> None:
    kinds = {c.kind for c in CASES}
    assert len(CASES) >= 110
    assert {"message", "edited_message", "channel_post", "callback_query", "inline_query",
            "chosen_inline_result", "my_chat_member", "chat_member", "chat_join_request",
            "message_reaction", "message_reaction_count", "poll", "poll_answer",
            "shipping_query", "pre_checkout_query", "business_message"} <= kinds  # fmt: skip
    assert sum(c.outcome == "turn" and bool(c.expect.get("thread")) for c in CASES) >= 2  # topics


def test_every_update_reaches_the_gateway_under_its_own_event_id() -> None:
    # Two cases with one event id would make the second a "redelivery" of the first.
    ids = [event for c in CASES for event in event_ids(c.payload)]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("mode", MODES)
def test_nothing_happened_that_no_update_asked_for(replays: dict[str, Replay], mode: str) -> None:
    done = replays[mode]
    assert done.unclaimed == []
    assert done.sent_messages == done.outbox_posts  # every post the fake got was asked for


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_replayed_update(replays: dict[str, Replay], mode: str, case: Case) -> None:
    seen = replays[mode].seen[case.id]
    expect = case.expect
    if mode == "webhook":
        assert seen.statuses == [case.status, case.status]
    if case.outcome == "turn":
        assert len(seen.turns) == 1, f"{len(seen.turns)} turns"
        thread = seen.turns[0]["thread"]
        assert (thread["chat"], thread.get("thread")) == (expect["chat"], expect.get("thread"))
    else:
        assert seen.turns == []
    reply = expect.get("reply")
    queued = [m.text for m in seen.outbox]
    answered = [a.text for a in seen.answers]
    if reply is None:
        assert (queued, answered) == ([], []), "sent something for an update that asks nothing"
    else:
        assert len(queued) <= 1, queued  # one answer, however often the update came
        assert any(reply in text for text in [*queued, *answered]), (queued, answered)
    if "answered" in expect:  # the press was answered, once, whoever answered it
        assert [a.callback_query_id for a in seen.answers] == [expect["answered"]]
