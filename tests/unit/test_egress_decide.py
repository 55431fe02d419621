"""Egress decisions, table-driven: no Redis, no sleeps (bot.gateway.delivery.decide)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.gateway.delivery import (
    NOT_READY_SECONDS,
    POLL_SECONDS,
    RETRY_AFTER_CEILING,
    Ack,
    Action,
    BreakLock,
    DeadLetter,
    Failure,
    Lock,
    MarkDelivered,
    Policy,
    Retry,
    Send,
    Settled,
    State,
    Wait,
    backoff,
    decide,
    first_missing,
)
from bot.store.outbox import EntryState

ME = "gw-me"
POLICY = Policy(attempts=3, backoff_base=1.0, backoff_cap=5.0)
FREE = EntryState(
    delivered=False, pending=True, deliveries=1, holder=None, holder_alive=False, parts={}
)
MINE = replace(FREE, holder=ME, holder_alive=True)


def state(snapshot: EntryState = MINE, **changes: object) -> State:
    return replace(State(consumer=ME, platform="slack", snapshot=snapshot), **changes)  # type: ignore[arg-type]


CASES: list[tuple[str, State, Action]] = [
    # Settled by someone: never send.
    ("delivered elsewhere", state(replace(FREE, delivered=True)), Ack()),
    ("delivered beats my lock", state(replace(MINE, delivered=True)), Ack()),
    ("acknowledged elsewhere", state(replace(FREE, pending=False)), Settled()),
    # The sending lock.
    ("nobody sends it", state(FREE), Lock()),
    (
        "a live gateway sends it",
        state(replace(FREE, holder="b", holder_alive=True)),
        Wait(POLL_SECONDS),
    ),
    ("its sender died", state(replace(FREE, holder="b", holder_alive=False)), BreakLock("b")),
    # Mine: what to send.
    ("fresh entry", state(), Send(first_part=0, in_doubt=False)),
    ("parts 0-1 posted", state(replace(MINE, parts={0: "a", 1: "b"})), Send(2, False)),
    ("gap in parts", state(replace(MINE, parts={0: "a", 2: "c"})), Send(1, False)),
    ("taken over from a dead gateway", state(replace(MINE, deliveries=2)), Send(0, True)),
    ("second attempt here", state(attempts=1), Send(0, True)),
    ("resumed after Redis came back", state(resumed=True), Send(0, True)),
    ("taken over mid-split", state(replace(MINE, deliveries=3, parts={0: "a"})), Send(1, True)),
    # After a send.
    ("sent", state(attempts=1, sent=("a", "b")), MarkDelivered(("a", "b"))),
    (
        "429 with Retry-After",
        state(attempts=1, failure=Failure(reason="429", retry_after=7.0)),
        Retry(after=7.0, reason="429"),
    ),
    ("5xx, first backoff", state(attempts=1, failure=Failure(reason="503")), Retry(1.0, "503")),
    ("5xx, second backoff", state(attempts=2, failure=Failure(reason="503")), Retry(2.0, "503")),
    (
        "Retry-After beyond the ceiling",
        state(attempts=1, failure=Failure(reason="429", retry_after=10_000.0)),
        Retry(RETRY_AFTER_CEILING, "429"),
    ),
    (
        "permanent error",
        state(attempts=1, failure=Failure(reason="no such chat", permanent=True)),
        DeadLetter("no such chat (after 1 attempt(s))"),
    ),
    (
        "budget spent",
        state(attempts=3, failure=Failure(reason="down")),
        DeadLetter("down (after 3 attempt(s))"),
    ),
    # Entries that cannot be sent: dead-lettered once the lock is ours.
    ("malformed", state(malformed=True, platform=""), DeadLetter("malformed entry")),
    ("malformed, not locked yet", state(FREE, malformed=True), Lock()),
    ("no adapter", state(adapter=False), DeadLetter("no adapter for platform 'slack'")),
    ("adapter still starting: wait, spend no retry", state(ready=False), Wait(NOT_READY_SECONDS)),
]


@pytest.mark.parametrize(("why", "given", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(why: str, given: State, expected: Action) -> None:
    assert decide(given, POLICY) == expected


@pytest.mark.parametrize(
    ("attempt", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (10, 5.0)]
)
def test_backoff_doubles_up_to_the_cap(attempt: int, expected: float) -> None:
    assert backoff(attempt, base=1.0, cap=5.0) == expected


@pytest.mark.parametrize(
    ("parts", "expected"), [({}, 0), ({0: "a"}, 1), ({1: "b"}, 0), ({0: "a", 1: "b", 3: "d"}, 2)]
)
def test_first_missing_part(parts: dict[int, str], expected: int) -> None:
    assert first_missing(parts) == expected


def test_a_whole_delivery_walks_lock_send_retry_send_mark() -> None:
    """The loop's view: observe, decide, apply what the action changed, repeat."""
    steps = [
        (state(FREE), Lock()),
        (state(), Send(0, False)),
        (
            state(replace(MINE, parts={0: "a"}), attempts=1, failure=Failure(reason="503")),
            Retry(1.0, "503"),
        ),
        (state(replace(MINE, parts={0: "a"}), attempts=1), Send(1, True)),
        (
            state(replace(MINE, parts={0: "a", 1: "b"}), attempts=2, sent=("a", "b")),
            MarkDelivered(("a", "b")),
        ),
    ]
    assert [decide(s, POLICY) for s, _ in steps] == [a for _, a in steps]
