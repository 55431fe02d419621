"""Thread-bound children against real Redis: the durable open request, the binding both
ways, the announce in both threads, routing of people's messages, and close."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.commands import default_router
from bot.deps import Deps
from bot.errors import DeliveryError
from bot.gateway.ingress import Ingress
from bot.gateway.thread_opener import ThreadOpenings
from bot.ports import OpenedThread, OutboundChannel
from bot.runs.finalize import finalize_run
from bot.runs.thread_children import (
    copy_to_parent,
    open_key,
    parent_announce,
    thread_opened,
)
from bot.store.threads import BindState
from bot.types import Inbound, Outbound, RunRecord, RunStatus, Sender, ThreadRef
from tests.integration.test_control_redis import THREAD, command, deps, session_of

__all__ = ["deps"]  # the fixture

CHILD = ThreadRef(platform="slack", account="T1", chat="C1", thread="9.0")
LINK = "https://example.slack.com/archives/C1/p90"


def spawn_run(deps: Deps, *, task: str = "t", thread: bool = True) -> RunRecord:
    """``sessions_spawn`` as the main agent calls it, from ``THREAD``, by ``slack:U1``."""
    ctx = ToolContext(
        deps=deps,
        session_key=session_of(THREAD),
        thread=THREAD,
        requester="slack:U1",
        agent_id="main",
    )
    answer = spawn(ctx, SpawnArgs(task=task, thread=thread))
    record = deps.runs.get(str(answer["runId"]))
    assert record is not None
    return record


def outbox(deps: Deps) -> list[dict[str, Any]]:
    entries: list[tuple[bytes, dict[bytes, bytes]]] = deps.redis.xrange(deps.keys.outbox)  # type: ignore[assignment]
    return [json.loads(fields[b"data"]) for _id, fields in entries]


def by_key(deps: Deps, key: str) -> dict[str, Any]:
    (found,) = [o for o in outbox(deps) if o["idempotency_key"] == key]
    return found


def test_sessions_spawn_with_thread_asks_the_gateway_and_waits_pending(deps: Deps) -> None:
    record = spawn_run(deps, task="map the repo")
    ask = by_key(deps, open_key(record.run_id))
    assert ask["kind"] == "open_thread" and ask["text"] == "#1 general-purpose: map the repo"
    assert ask["thread"] == THREAD.to_json()
    binding = deps.thread_bindings.for_run(record.run_id)
    assert binding is not None and binding.state == BindState.PENDING
    assert deps.jobs.exists(record.job_id)  # the run does not wait for its thread


def test_opened_binds_both_ways_moves_the_run_and_is_idempotent(deps: Deps) -> None:
    record = spawn_run(deps)
    first = thread_opened(deps, record.run_id, thread=CHILD, link=LINK)
    again = thread_opened(deps, record.run_id, thread=None, note="late duplicate")
    assert first is not None and first.state == BindState.BOUND
    assert again == first  # a redelivered request changes nothing
    assert deps.thread_bindings.for_thread(CHILD) == record.run_id
    moved = deps.runs.get(record.run_id)
    assert moved is not None and moved.thread == CHILD
    intro = by_key(deps, f"thread-intro:{record.run_id}")
    assert intro["thread"] == CHILD.to_json() and "/subagents close 1" in intro["text"]
    assert LINK in by_key(deps, f"thread-note:{record.run_id}")["text"]


def test_unavailable_keeps_the_run_where_it_was_and_says_why(deps: Deps) -> None:
    record = spawn_run(deps)
    thread_opened(deps, record.run_id, thread=None, note="the chat is not a forum")
    kept = deps.runs.get(record.run_id)
    assert kept is not None and kept.thread == THREAD
    note = by_key(deps, f"thread-note:{record.run_id}")
    assert "the chat is not a forum" in note["text"] and note["thread"] == THREAD.to_json()
    finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="done")
    own = Outbound.from_json(by_key(deps, f"announce:{record.run_id}"))
    assert own.thread == THREAD and parent_announce(deps, own) is None


def test_the_announce_goes_to_the_child_thread_and_a_linked_copy_to_the_parent(
    deps: Deps,
) -> None:
    record = spawn_run(deps)
    thread_opened(deps, record.run_id, thread=CHILD, link=LINK)
    assert finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="the answer")
    own = by_key(deps, f"announce:{record.run_id}")
    assert own["thread"] == CHILD.to_json() and "the answer" in own["text"]
    posted = Outbound.from_json(own)
    copy_to_parent(deps, posted)  # egress, once the announce is posted
    copy_to_parent(deps, posted)  # a gateway that died before recording it: same key again
    copies = [o for o in outbox(deps) if o["idempotency_key"] == f"announce-parent:{record.run_id}"]
    assert len(copies) == 2 and copies[0] == copies[1]  # egress posts one key once
    assert copies[0]["thread"] == THREAD.to_json() and copies[0]["kind"] == "announce"
    assert copies[0]["text"] == own["text"] + f"\n🧵 Its thread: {LINK}"
    assert not finalize_run(deps, record.run_id, status=RunStatus.ERROR)


def test_only_a_bound_runs_announce_in_its_thread_is_copied(deps: Deps) -> None:
    record = spawn_run(deps)
    early = Outbound.from_json(
        {"thread": THREAD.to_json(), "text": "x", "kind": "announce",
         "idempotency_key": f"announce:{record.run_id}", "run_id": record.run_id}
    )  # fmt: skip
    assert parent_announce(deps, early) is None  # pending: it announced where it came from
    thread_opened(deps, record.run_id, thread=CHILD, link=LINK)
    assert parent_announce(deps, early) is None  # posted before the thread was open
    reply = Outbound(
        thread=CHILD, text="x", idempotency_key=f"announce:{record.run_id}", run_id=record.run_id
    )
    assert parent_announce(deps, reply) is None  # not an announce


def inbound(text: str, *, user: str = "U1", thread: ThreadRef = CHILD, mid: str = "m1") -> Inbound:
    return Inbound(
        thread=thread, sender=Sender(user_id=user, display_name=user), text=text, message_id=mid
    )


def test_messages_in_the_bound_thread_steer_then_follow_up_then_close(deps: Deps) -> None:
    record = spawn_run(deps)
    thread_opened(deps, record.run_id, thread=CHILD, link=LINK)
    ingress = Ingress(deps=deps, router=default_router())
    deps.runs.update(record.run_id, status=RunStatus.RUNNING.value)
    result = ingress.handle(inbound("look at the API"))  # no mention needed there
    assert result.job_id is None
    assert [m for m, _ in deps.runs.drain_inbox_receipts(record.run_id)] == ["look at the API"]
    assert "📨 Passed to subagent #1" in outbox(deps)[-1]["text"]
    finalize_run(deps, record.run_id, status=RunStatus.SUCCESS, result="r")
    ingress.handle(inbound("and now the tests", mid="m2"))
    follow = [r for r in deps.runs.all() if r.run_id != record.run_id]
    assert [(r.task, r.thread) for r in follow] == [("and now the tests", CHILD)]
    refused = ingress.handle(inbound("me too", user="U9", mid="m3"))
    assert refused.job_id is None and "belongs to subagent #1" in outbox(deps)[-1]["text"]
    closed = command(deps, "/subagents close 1", thread=CHILD)
    assert closed.startswith("🧵 Closed the thread of subagent #1")
    assert deps.thread_bindings.for_thread(CHILD) is None
    assert command(deps, "/subagents close 1").startswith("Subagent #1 has no thread")


def test_only_the_requester_or_an_admin_closes(deps: Deps) -> None:
    record = spawn_run(deps)
    thread_opened(deps, record.run_id, thread=CHILD, link=LINK)
    assert command(deps, "/subagents close 1", user="U9").startswith("I can't close")
    assert command(deps, "/subagents close 1", user="UADMIN").startswith("🧵 Closed")


class Opener:
    """An adapter that opens threads (or fails as told), counting the calls."""

    platform = "slack"

    def __init__(self, error: DeliveryError | None = None) -> None:
        self.error, self.opened = error, 0

    async def open_thread(self, parent: ThreadRef, title: str) -> OpenedThread:
        if self.error is not None:
            raise self.error
        self.opened += 1
        return OpenedThread(thread=CHILD, link=LINK)


def ask_of(deps: Deps, record: RunRecord) -> Outbound:
    return Outbound.from_json(by_key(deps, open_key(record.run_id)))


async def test_a_gateway_opens_a_request_written_while_it_was_down_once(deps: Deps) -> None:
    record = spawn_run(deps)  # no gateway yet: the request waits in the outbox
    openings, adapter = ThreadOpenings(deps=deps), Opener()
    ask = ask_of(deps, record)
    assert await openings.open(cast("OutboundChannel", adapter), ask) == ["9.0"]
    assert await openings.open(cast("OutboundChannel", adapter), ask) == ["9.0"]  # redelivered
    assert adapter.opened == 1
    assert deps.thread_bindings.for_thread(CHILD) == record.run_id


async def test_a_refusal_settles_unavailable_and_a_transient_failure_retries(deps: Deps) -> None:
    record = spawn_run(deps)
    openings = ThreadOpenings(deps=deps)
    flaky = cast("OutboundChannel", Opener(DeliveryError("telegram: 502", retry_after=1.0)))
    with pytest.raises(DeliveryError):
        await openings.open(flaky, ask_of(deps, record))
    binding = deps.thread_bindings.for_run(record.run_id)
    assert binding is not None and binding.state == BindState.PENDING
    refused = cast("OutboundChannel", Opener(DeliveryError("not a forum", permanent=True)))
    assert await openings.open(refused, ask_of(deps, record)) == ["unavailable"]
    binding = deps.thread_bindings.for_run(record.run_id)
    assert binding is not None and binding.state == BindState.UNAVAILABLE
    assert "not a forum" in by_key(deps, f"thread-note:{record.run_id}")["text"]
