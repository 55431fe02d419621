"""Steer receipts against real Redis: queued -> delivered / missed, and the reply's edit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.deps import Deps
from bot.runs.finalize import finalize_run
from bot.runs.steer_receipts import read_inbox
from bot.store.receipts import ReceiptState
from bot.testing import MemoryChannel
from bot.types import Outbound, RunStatus, ThreadRef
from tests.integration.test_control_redis import command, session_of, spawn_run
from tests.integration.test_egress import KEYS, run_egress


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    from tests.integration.test_chat_spawn_schedules import make_deps

    d = make_deps(redis_url)
    yield d
    d.close()


def outbox(deps: Deps) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)]


def running(deps: Deps, **kw: Any) -> str:
    record = spawn_run(deps, **kw)
    assert deps.runs.start(record.run_id, heartbeat_ttl=30).started
    return record.run_id


def test_a_steer_is_queued_then_delivered_and_its_reply_edited(deps: Deps) -> None:
    run_id = running(deps, label="work")
    answer = command(deps, "/subagents send 1 use 6*7", user="U1")
    queued = "📨 Queued for subagent #1 · work: it reads your message before its next step."
    assert answer == ""  # answered already: the reply is queued before the message
    (reply,) = outbox(deps)  # posted before the message could be read
    assert reply["text"] == queued and reply["idempotency_key"] == "cmd:slack:m"

    assert read_inbox(deps, run_id) == ["use 6*7"]
    assert read_inbox(deps, run_id) == []
    _, edit = outbox(deps)
    assert edit["replaces"] == "cmd:slack:m" and edit["ephemeral_to"] is None
    assert edit["text"] == "✅ Delivered to subagent #1 · work: it read your message between two steps."  # fmt: skip
    # Its end finds nothing left: no follow-up, no second edit.
    assert finalize_run(deps, run_id, status=RunStatus.SUCCESS, result="ok")
    assert [m["kind"] for m in outbox(deps)] == ["reply", "reply", "announce"]


def test_a_steer_the_run_never_read_is_missed_and_followed_up(deps: Deps) -> None:
    run_id = running(deps, label="work")
    command(deps, "/subagents send 1 also check B", user="U1")
    assert finalize_run(deps, run_id, status=RunStatus.SUCCESS, result="done")

    runs = deps.runs.session_runs(session_of(ThreadRefs.main))
    follow = runs[0]
    assert follow.seq == 2 and follow.task == "also check B" and follow.status is RunStatus.QUEUED
    assert follow.child_session_key == runs[1].child_session_key
    edit = outbox(deps)[-1]
    assert edit["replaces"] == "cmd:slack:m"
    assert edit["text"] == (
        "↪️ Subagent #1 · work ended before reading your message, so I started a follow-up on "
        f"the same session with it: run #2 (`{follow.run_id[:8]}`). Its answer will be "
        "announced here."
    )
    # Reading afterwards changes nothing: a receipt leaves "queued" once.
    assert read_inbox(deps, run_id) == []


def test_a_stopped_run_drops_its_unread_steer_and_says_so(deps: Deps) -> None:
    run_id = running(deps, label="work")
    command(deps, "/subagents send 1 more", user="U1")
    assert finalize_run(deps, run_id, status=RunStatus.STOPPED)
    assert len(deps.runs.session_runs(session_of(ThreadRefs.main))) == 1
    assert outbox(deps)[-1]["text"].startswith("⚠️ Subagent #1 · work ended before reading")


def test_a_channel_level_send_gets_a_new_ephemeral_message(deps: Deps) -> None:
    channel = ThreadRef(platform="slack", account="T1", chat="C1")
    run_id = running(deps, thread=channel, label="work")
    command(deps, "/subagents send 1 hi", user="U1", thread=channel)
    read_inbox(deps, run_id)
    reply, update = outbox(deps)
    assert reply["ephemeral_to"] == "U1" and update["ephemeral_to"] == "U1"
    assert "replaces" not in update and update["text"].startswith("✅ Delivered")
    receipt_id = update["idempotency_key"].split(":")[1]
    got = deps.receipts.get(receipt_id)
    assert got is not None and got.state is ReceiptState.DELIVERED


class ThreadRefs:
    main = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")


async def test_egress_edits_the_earlier_reply_by_its_key(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    thread = ThreadRef(platform="console", account="a", chat="c", thread="t")
    first = Outbound(thread=thread, text="📨 Queued", idempotency_key="cmd:console:1")
    edit = Outbound(
        thread=thread,
        text="✅ Delivered",
        idempotency_key="receipt:r:delivered",
        replaces="cmd:console:1",
    )
    for m in (first, edit):
        await client.xadd(KEYS.outbox, {"data": json.dumps(m.to_json())})
    channel = MemoryChannel()
    try:
        await run_egress(client, channel, lambda e: channel.edits)
    finally:
        await client.aclose()
    assert [m.text for m in channel.sent] == ["📨 Queued"]
    (done,) = channel.edits
    assert done.message_id == "msg-1" and done.text == "✅ Delivered"


def test_the_receipt_reply_key_is_the_gateways() -> None:
    # The early reply and the gateway's own copy must share the key, or both would post.
    from bot.commands.router import early_reply, reply_key
    from bot.types import Inbound, Sender

    inbound = Inbound(
        thread=ThreadRefs.main,
        sender=Sender(user_id="U", display_name="U"),
        text="/x",
        message_id="9",
    )
    assert early_reply(inbound, "t").idempotency_key == reply_key(inbound) == "cmd:slack:9"
