"""Ingress bounds the messages per minute of each person and thread, and lets approval
decisions through only from people its access policy admits (real Redis and RQ).

The clock is fixed so a burst stays inside one minute's window.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from bot.commands import default_router
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.admission import Verdict
from bot.gateway.ingress import PRESS_DENIED, Ingress, IngressResult
from bot.store.approvals import ApprovalRecord, ApprovalState, PendingCall
from bot.types import Inbound, Sender, ThreadRef

THREAD = ThreadRef(platform="telegram", account="B1", chat="-100", thread="7")
OTHER = ThreadRef(platform="telegram", account="B1", chat="-100", thread="8")
NOW = 1_800_000_010.0  # 10 s into a minute's window: the next one starts in 50 s


def make_deps(redis_url: str, **settings: Any) -> Deps:
    built = Settings(redis_url=redis_url, admins=["telegram:ADMIN"], **settings)
    return Deps.build(built, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    built = make_deps(redis_url)
    yield built
    built.close()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def make_ingress(deps: Deps, clock: Clock | None = None, *, fixed: bool = True) -> Ingress:
    if not fixed:  # the decisions' tests: no window involved
        return Ingress(deps=deps, router=default_router())
    return Ingress(deps=deps, router=default_router(), clock=clock or Clock())


class Sent:
    """Numbers the messages of a test so each is a new platform event."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(
        self, ingress: Ingress, text: str, *, user: str = "U1", thread: ThreadRef = THREAD
    ) -> IngressResult:
        self.n += 1
        inbound = Inbound(
            thread=thread,
            sender=Sender(user_id=user, display_name=user),
            text=text,
            message_id=str(self.n),
            mentioned=True,
        )
        return ingress.handle(inbound)


def outbox(deps: Deps) -> list[dict[str, Any]]:
    entries = deps.redis.xrange(deps.keys.outbox)
    return [json.loads(fields[b"data"]) for _, fields in entries]


def texts(deps: Deps) -> list[str]:
    return [str(m["text"]) for m in outbox(deps)]


def test_a_burst_from_one_person_queues_their_limit_and_is_answered_once(deps: Deps) -> None:
    ingress, send = make_ingress(deps), Sent()
    results = [send(ingress, f"message {n}") for n in range(60)]

    queued = [r for r in results if r.job_id]
    assert len(queued) == 20  # FANBOT_LIMITS__MESSAGES_PER_MINUTE_PER_USER
    assert all(deps.jobs.exists(str(r.job_id)) for r in queued)
    assert [r.verdict for r in results[20:]] == [Verdict.LIMITED] * 40
    assert texts(deps) == ["⏳ Slow down: you can send again in 50 s."]  # once, not 40 times


def test_commands_count_too_and_the_next_minute_admits_again(deps: Deps) -> None:
    clock = Clock()
    ingress, send = make_ingress(deps, clock), Sent()
    for _ in range(20):
        send(ingress, "/subagents list")
    assert send(ingress, "/subagents list").verdict is Verdict.LIMITED
    before = len(texts(deps))
    assert send(ingress, "/subagents list").verdict is Verdict.LIMITED  # dropped, no answer
    assert len(texts(deps)) == before

    clock.now += 50
    assert send(ingress, "hello again").job_id is not None


def test_the_thread_limit_binds_everyone_in_it_and_a_spammer_spends_only_their_own(
    redis_url: str,
) -> None:
    limits = {"messages_per_minute_per_user": 3, "messages_per_minute_per_thread": 5}
    deps = make_deps(redis_url, limits=limits)
    try:
        ingress, send = make_ingress(deps), Sent()
        spammer = [send(ingress, f"spam {n}", user="U1") for n in range(30)]
        assert sum(bool(r.job_id) for r in spammer) == 3  # the other 27 did not use the thread's

        assert send(ingress, "one", user="U2").job_id is not None
        assert send(ingress, "two", user="U2").job_id is not None
        refused = send(ingress, "three", user="U2")  # the thread's 6th: over its 5
        assert refused.verdict is Verdict.LIMITED
        assert send(ingress, "hi", user="U3").verdict is Verdict.LIMITED  # answered already
        assert send(ingress, "elsewhere", user="U3", thread=OTHER).job_id is not None

        answers = outbox(deps)
        assert [a["text"] for a in answers] == [
            "⏳ Slow down: you can send again in 50 s.",
            "⏳ Slow down: this thread has reached its messages per minute; "
            "you can send again in 50 s.",
        ]
        assert answers[0]["ephemeral_to"] == "U1" and answers[1]["ephemeral_to"] is None
    finally:
        deps.close()


def test_admins_are_exempt(deps: Deps) -> None:
    ingress, send = make_ingress(deps), Sent()
    results = [send(ingress, f"message {n}", user="ADMIN") for n in range(45)]
    assert all(r.job_id for r in results)
    assert texts(deps) == []


def test_gateway_processes_share_the_counts(redis_url: str) -> None:
    """Two gateways (their own clients and ingresses), 60 messages at once: 20 queued."""
    gateways = [make_deps(redis_url) for _ in range(2)]
    results: list[IngressResult] = []
    lock = threading.Lock()

    def burst(deps: Deps, first: int) -> None:
        ingress = make_ingress(deps)
        for n in range(first, first + 30):
            inbound = Inbound(
                thread=THREAD, sender=Sender(user_id="U1"), text="hi", message_id=str(n),
                mentioned=True,
            )  # fmt: skip
            result = ingress.handle(inbound)
            with lock:
                results.append(result)

    try:
        threads = [threading.Thread(target=burst, args=(d, 30 * i)) for i, d in enumerate(gateways)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(results) == 60
        assert sum(bool(r.job_id) for r in results) == 20
        assert texts(gateways[0]).count("⏳ Slow down: you can send again in 50 s.") == 1
    finally:
        for d in gateways:
            d.close()


# --- !approve / !deny pass the access policy first -----------------------------------------


def approval(deps: Deps, approval_id: str = "ab12cd34") -> None:
    deps.approvals.create(
        ApprovalRecord(
            approval_id=approval_id,
            run_id="r1",
            calls=(PendingCall(id="c1", name="write_file", arguments="{}"),),
            thread=THREAD,
            requester="telegram:U1",
            created_at=time.time(),
            due_at=time.time() + 3600,
        )
    )


@pytest.mark.parametrize("text", ["!approve ab12cd34", "!deny ab12cd34", "!approve 00000000"])
def test_a_decision_from_outside_the_allowlist_is_ignored_like_any_message(
    redis_url: str, text: str
) -> None:
    deps = make_deps(redis_url, telegram={"allow_users": ["U1"]})
    try:
        approval(deps)
        ingress, send = make_ingress(deps, fixed=False), Sent()
        assert send(ingress, text, user="INTRUDER").verdict is Verdict.DENIED
        assert send(ingress, "hello", user="INTRUDER").verdict is Verdict.DENIED  # the same
        assert outbox(deps) == []  # no answer: nothing learned about the approval
        found = deps.approvals.get("ab12cd34")
        assert found is not None and found.state is ApprovalState.PENDING
    finally:
        deps.close()


def test_a_decision_from_an_allowed_person_is_answered(redis_url: str) -> None:
    deps = make_deps(redis_url, telegram={"allow_users": ["U1"]})
    try:
        ingress, send = make_ingress(deps, fixed=False), Sent()
        assert send(ingress, "!approve 00000000", user="U1").verdict is Verdict.ACCEPT
        assert len(outbox(deps)) == 1  # "no such approval", to the person allowed to ask
    finally:
        deps.close()


def test_a_button_press_from_outside_the_allowlist_is_answered_and_decides_nothing(
    redis_url: str,
) -> None:
    deps = make_deps(redis_url, telegram={"allow_users": ["U1"]})
    try:
        approval(deps)
        ingress = make_ingress(deps, fixed=False)
        press = Inbound(
            thread=THREAD,
            sender=Sender(user_id="INTRUDER"),
            text="!approve ab12cd34",
            message_id="cbq-1",
            mentioned=True,
            callback="cbq-1",
        )
        assert ingress.handle(press).verdict is Verdict.DENIED
        assert ingress.handle(press).duplicate  # Telegram's redelivery: answered once
        [answer] = outbox(deps)
        assert answer["callback"] == "cbq-1" and answer["text"] == PRESS_DENIED
        assert answer["ephemeral_to"] is None  # only the press is answered, nothing posted
        found = deps.approvals.get("ab12cd34")
        assert found is not None and found.state is ApprovalState.PENDING
    finally:
        deps.close()
