"""Ingress gives each platform event exactly one turn, whichever delivery dies where.

Real Redis and RQ; the crash points are simulated by writing what a dead delivery would
have left behind (its claim, with or without its job).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.rate_limit import RateLimitRegistry

from bot.commands import default_router
from bot.config import Settings
from bot.deps import Deps
from bot.errors import InboundBusy
from bot.gateway.admission import Admit, admit
from bot.gateway.ingress import Ingress
from bot.sessions import requester_session_key
from bot.store.dedupe import Claimed, Dedupe
from bot.store.jobs import TURNS_QUEUE, turn_lane
from bot.types import Inbound, Sender, ThreadRef

THREAD = ThreadRef(platform="telegram", account="B1", chat="-100", thread="7")


def session_of(thread: ThreadRef) -> str:
    return requester_session_key(agent_id="main", thread=thread)


def message(message_id: str = "41", text: str = "hello bot") -> Inbound:
    return Inbound(
        thread=THREAD,
        sender=Sender(user_id="U1"),
        text=text,
        message_id=message_id,
        mentioned=True,
    )


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    built = Deps.build(Settings(redis_url=redis_url), client=redis.Redis.from_url(redis_url))
    yield built
    built.close()


@pytest.fixture
def ingress(deps: Deps) -> Ingress:
    return Ingress(deps=deps, router=default_router())


def turns(deps: Deps) -> list[str]:
    """Turn jobs queued (each test sends one session at most one turn, so none waits)."""
    return Queue(TURNS_QUEUE, connection=deps.redis).get_job_ids()


def test_a_redelivery_after_the_turn_was_queued_is_a_duplicate(
    ingress: Ingress, deps: Deps
) -> None:
    first = ingress.handle(message())
    again = ingress.handle(message())
    assert first.job_id and not first.duplicate
    assert again.duplicate
    assert turns(deps) == [first.job_id]


def test_a_delivery_that_died_before_enqueueing_holds_redeliveries_until_its_hold_passes(
    ingress: Ingress, deps: Deps
) -> None:
    inbound = message()
    dead = Dedupe.claim_value("dead", "turn-0000000000001-deadbeef0000")
    claimed = deps.dedupe.claim("telegram", inbound.dedupe_id, value=dead, ttl=600)
    assert claimed.mine  # the dead delivery's claim, then Redis or its process went away
    with pytest.raises(InboundBusy):
        ingress.handle(inbound)  # the adapter leaves it unconfirmed and retries
    assert turns(deps) == []
    old = Dedupe.claim_value("dead", "turn-0000000000001-deadbeef0000", now=time.time() - 31)
    deps.redis.set(deps.keys.dedupe("telegram", inbound.dedupe_id), old)  # its hold passed
    result = ingress.handle(inbound)
    assert not result.duplicate and result.job_id
    assert turns(deps) == [result.job_id]
    assert ingress.handle(inbound).duplicate


def test_a_delivery_that_died_after_enqueueing_is_not_enqueued_twice(
    ingress: Ingress, deps: Deps
) -> None:
    inbound = message()
    first = ingress.handle(inbound)
    assert first.job_id
    # It died before marking the event done: its claim is left, naming its job.
    key = deps.keys.dedupe("telegram", inbound.dedupe_id)
    deps.redis.set(key, Dedupe.claim_value("dead", first.job_id, now=time.time() - 3600))
    assert ingress.handle(inbound).duplicate
    assert deps.redis.get(key) == b"done"
    assert turns(deps) == [first.job_id]


def test_a_claim_whose_reply_was_lost_is_recognized_as_ours(deps: Deps) -> None:
    mine = Dedupe.claim_value("t1", "turn-1")
    assert deps.dedupe.claim("slack", "C1:1.0", value=mine, ttl=60).mine
    # The client retries the SET after a lost reply: the key holds our own claim.
    assert deps.dedupe.claim("slack", "C1:1.0", value=mine, ttl=60).mine
    other = deps.dedupe.claim("slack", "C1:1.0", value=Dedupe.claim_value("t2", "turn-2"), ttl=60)
    assert not other.mine and not other.done and other.job_id == "turn-1" and other.age < 5
    deps.dedupe.done("slack", "C1:1.0", ttl=60)
    assert deps.dedupe.claim("slack", "C1:1.0", value=mine, ttl=60).done


def test_turns_of_one_session_are_queued_in_the_order_they_arrived(
    ingress: Ingress, deps: Deps
) -> None:
    ids = [ingress.handle(message(str(n), f"message {n}")).job_id for n in range(1, 8)]
    assert ids == sorted(ids)  # the lane breaks same-second ties by job id
    lane = RateLimitRegistry(turn_lane(session_of(THREAD)), connection=deps.redis)
    waiting = lane.get_rate_limited_job_ids()
    assert waiting == ids[1:]


ADMIT = [
    (Claimed(mine=True, job_id="j"), False, Admit.HANDLE),
    (Claimed(done=True), False, Admit.DUPLICATE),
    (Claimed(job_id="j", age=1.0, value="v"), True, Admit.DUPLICATE),
    (Claimed(job_id="j", age=1.0, value="v"), False, Admit.BUSY),
    (Claimed(job_id="j", age=31.0, value="v"), False, Admit.TAKE_OVER),
    (Claimed(job_id="j", age=31.0, value="v"), True, Admit.DUPLICATE),
]


@pytest.mark.parametrize(("claimed", "exists", "action"), ADMIT)
def test_admit_decides_from_the_claim_alone(claimed: Claimed, exists: bool, action: Admit) -> None:
    assert admit(claimed, other_job_exists=exists, hold_seconds=30) is action


def test_ignored_and_command_messages_are_marked_done_too(ingress: Ingress, deps: Deps) -> None:
    ignored = Inbound(
        thread=THREAD, sender=Sender(user_id="B", is_bot=True), text="hi", message_id="42"
    )
    assert not ingress.handle(ignored).duplicate
    assert ingress.handle(ignored).duplicate
    assert not ingress.handle(message("43", "/help")).duplicate
    assert ingress.handle(message("43", "/help")).duplicate
    assert turns(deps) == []
