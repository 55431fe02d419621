"""A main-agent turn whose worker dies goes on in a new attempt: the person gets exactly one
reply, the real answer, within seconds; or, after ``max_resumes`` + 1 deaths, one clear line
saying it was lost. Never silence, never two replies (docs/architecture.md, "Resume after a
crash", "Turns").

The first tests drive the fenced decision (:mod:`bot.store.turn_attempts`) and its policy
(:mod:`bot.agent.turn_recover`) on real Redis; the others kill real worker processes (both
pools) at failpoints of the turn's agent loop, or a whole host.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.agent.resume import INTERRUPTED
from bot.agent.turn_recover import reap_turns, recover_turn
from bot.config import Settings
from bot.deps import Deps
from bot.keys import Keys
from bot.store.jobs import TURNS_QUEUE, TurnJob
from bot.store.runs import RunsRegistry
from bot.store.turn_attempts import QUEUED, RUNNING, TurnVerdict
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Hang, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from tests.e2e.conftest import stack_values

SHIPPED_TIMERS = {"heartbeat_seconds": 1.0, "stale_after_seconds": 4.0}
"""The shipped heartbeat and staleness: "within seconds" is tested as shipped."""


# --- the fenced decision, on real Redis ------------------------------------------------------


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(redis_url=redis_url, subagents={"max_resumes": 2})
    built = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield built
    built.close()


def turn(**kw: object) -> TurnJob:
    fields: dict[str, object] = {
        "session_key": "console:c:t",
        "thread": {"platform": "console", "account": "a", "chat": "c", "thread": "t"},
        "platform": "console",
        "sender_id": "alice",
        "text": "hello",
        "message_id": "m1",
    }
    return TurnJob.model_validate({**fields, **kw})


def begun(deps: Deps, job: TurnJob, job_id: str = "turn-1") -> list[dict[str, object]] | None:
    return deps.turn_attempts.begin(
        job.reply_key,
        job_id=job_id,
        attempt=job.attempt,
        payload=job.model_dump(mode="json"),
        lease_seconds=4,
    )


def decide(deps: Deps, job: TurnJob, dead_job: str) -> TurnVerdict:
    return deps.turn_attempts.decide(
        job.reply_key,
        dead_job=dead_job,
        stop_flag=deps.keys.turn_stop(job.session_key),
        max_resumes=2,
        why="test",
    ).verdict


def test_two_noticers_of_one_death_resume_the_turn_once(deps: Deps) -> None:
    job = turn()
    assert begun(deps, job) == []
    got = deps.turn_attempts.decide(
        job.reply_key, dead_job="turn-1", stop_flag="none", max_resumes=2, why="launcher"
    )
    assert (got.verdict, got.attempt, got.job_id) == (TurnVerdict.RESUMED, 2, "turn-1-r2")
    assert got.payload == job.model_dump(mode="json")
    assert decide(deps, job, "turn-1") is TurnVerdict.NONE  # the reaper, a moment later
    assert decide(deps, job, "someone-else") is TurnVerdict.NONE
    (entry,) = deps.turn_attempts.in_flight()
    assert (entry.job_id, entry.attempt, entry.state) == ("turn-1-r2", 2, QUEUED)


def test_concurrent_noticers_queue_one_attempt(deps: Deps) -> None:
    job = turn()
    begun(deps, job)
    verdicts: list[TurnVerdict] = []
    payload = job.model_dump(mode="json")

    def notice() -> None:
        verdicts.append(recover_turn(deps, payload, dead_job="turn-1", why="test"))

    threads = [threading.Thread(target=notice) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(verdicts) == [TurnVerdict.NONE] * 3 + [TurnVerdict.RESUMED]
    queued = deps.jobs.queue(TURNS_QUEUE).get_job_ids()
    assert queued == ["turn-1-r2"]
    fetched = deps.jobs.fetch("turn-1-r2")
    assert fetched is not None and fetched.args[0]["attempt"] == 2


def test_a_superseded_job_does_not_run_and_the_next_attempt_reads_the_steps(deps: Deps) -> None:
    job = turn()
    begun(deps, job)
    user = {"role": "user", "content": "alice: hello"}
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    deps.turn_attempts.record(job.reply_key, [user], first=True)
    deps.turn_attempts.record(job.reply_key, [{"role": "assistant", "tool_calls": [call]}])
    assert decide(deps, job, "turn-1") is TurnVerdict.RESUMED
    again = job.model_copy(update={"attempt": 2})
    assert begun(deps, again, "turn-1") is None  # the old job, if it ever ran again
    steps = begun(deps, again, "turn-1-r2")
    assert steps is not None and [m["role"] for m in steps] == ["user", "assistant"]
    assert 0 < deps.redis.ttl(deps.keys.turn_steps(job.reply_key)) <= deps.turn_attempts.ttl_seconds
    (entry,) = deps.turn_attempts.in_flight()
    assert entry.state == RUNNING and deps.turn_attempts.lease_alive(job.reply_key)


def test_a_job_killed_before_its_turn_began_is_resumed_unless_the_turn_answered(
    deps: Deps,
) -> None:
    job = turn()
    payload = job.model_dump(mode="json")
    assert recover_turn(deps, payload, dead_job="turn-1", why="t", executing=False) == 0
    assert recover_turn(deps, payload, dead_job="turn-1", why="t") is TurnVerdict.RESUMED
    assert recover_turn(deps, payload, dead_job="turn-1", why="t") is TurnVerdict.NONE
    assert deps.jobs.queue(TURNS_QUEUE).get_job_ids() == ["turn-1-r2"]

    answered = turn(message_id="m2")
    begun(deps, answered, "turn-2")
    deps.turn_attempts.finish(answered.reply_key)
    again = answered.model_dump(mode="json")
    assert recover_turn(deps, again, dead_job="turn-2", why="t") is TurnVerdict.NONE


def test_a_turn_that_answered_is_never_run_again(deps: Deps) -> None:
    job = turn()
    begun(deps, job)
    with deps.connection.batch() as pipe:
        deps.turn_attempts.finish(job.reply_key, pipe=pipe)
        pipe.execute()
    assert decide(deps, job, "turn-1") is TurnVerdict.NONE
    assert deps.turn_attempts.in_flight() == []
    assert not deps.redis.exists(deps.keys.turn_steps(job.reply_key))


def test_too_many_deaths_post_one_lost_line_and_a_stop_is_kept(deps: Deps) -> None:
    job, dead = turn(), "turn-1"
    begun(deps, job, dead)
    for attempt in (2, 3):
        assert recover_turn(deps, job.model_dump(mode="json"), dead_job=dead, why="x") == 1
        dead = f"turn-1-r{attempt}"
        assert begun(deps, job.model_copy(update={"attempt": attempt}), dead) is not None
    assert recover_turn(deps, job.model_dump(mode="json"), dead_job=dead, why="x") == 3
    assert recover_turn(deps, job.model_dump(mode="json"), dead_job=dead, why="x") == 0
    replies = outbox_texts(deps)
    assert replies == ["⚠️ I lost this answer: the worker died 3 times. Please send it again."]

    stopped = turn(message_id="m2")
    begun(deps, stopped, "turn-2")
    deps.stops.stop_turn(stopped.session_key, ttl=60)
    assert decide(deps, stopped, "turn-2") is TurnVerdict.STOPPED


def test_the_reaper_resumes_a_lapsed_lease_and_queues_a_lost_enqueue(deps: Deps) -> None:
    job = turn()
    begun(deps, job)
    deps.redis.delete(deps.keys.turn_lease(job.reply_key))  # its host died
    assert reap_turns(deps) == []  # it began just now: not stale yet
    assert reap_turns(deps, now=time.time() + 5) == [job.reply_key]
    assert deps.jobs.queue(TURNS_QUEUE).get_job_ids() == ["turn-1-r2"]

    other = turn(message_id="m2")
    begun(deps, other, "turn-2")
    # A noticer that died between the decision and the enqueue: the mark says queued.
    assert decide(deps, other, "turn-2") is TurnVerdict.RESUMED
    assert reap_turns(deps, now=time.time() + 5) == [other.reply_key]
    assert deps.jobs.fetch("turn-2-r2") is not None
    assert reap_turns(deps, now=time.time() + 5) == []  # queued now: left alone


def outbox_texts(deps: Deps) -> list[str]:
    entries = deps.redis.xrange(deps.keys.outbox)
    return [json.loads(fields[b"data"])["text"] for _, fields in entries]


# --- real workers dying ----------------------------------------------------------------------


def run_count(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return len(RunsRegistry(redis=client, keys=Keys()).all())
    finally:
        client.close()


def failing_stack(
    values: dict[str, object], channel: MemoryChannel, failpoints: str, log_dir: Path
) -> Stack:
    stack = Stack(values=values, adapters=[channel], workers=1, log_dir=log_dir)
    stack.pool.env["FANBOT_FAILPOINTS"] = failpoints
    return stack


async def one_reply(stack: Stack, channel: MemoryChannel, *, timeout: float) -> float:
    """Seconds until the first reply; then waits a little more for a second one (there
    must be none)."""
    started = time.monotonic()
    await stack.wait_for(lambda: len(channel.replies) >= 1, timeout=timeout)
    took = time.monotonic() - started
    await asyncio.sleep(2.0)
    assert len(channel.replies) == 1, [r.text for r in channel.replies]
    return took


async def test_a_worker_killed_in_the_model_call_answers_once(
    redis_url: str, tmp_path: Path
) -> None:
    model = ScriptedModel().on("what is 6 x 7", Text("the real answer: 42"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=SHIPPED_TIMERS)
        once = tmp_path / "once"
        fail = f"turn.in_model_call=kill!{once}"
        async with failing_stack(values, channel, fail, tmp_path) as stack:
            await channel.say("what is 6 x 7")
            took = await one_reply(stack, channel, timeout=30)
            log = stack.worker_log()
    assert once.exists(), "the failpoint never fired"
    assert channel.replies[0].text == "the real answer: 42"
    assert len(fake.requests) == 2  # the call in flight, made again
    assert "resumed in attempt 2" in log
    print(f"killed in the model call -> one reply in {took:.1f}s")
    assert took < 20


async def test_a_worker_killed_in_a_spawn_never_spawns_twice(
    redis_url: str, tmp_path: Path
) -> None:
    def main(request: ChatRequest) -> Reply:
        last = request.messages[-1]
        if request.last_role == "tool" and "interrupted" in str(last.get("content")):
            return Text("The research run may have started; sessions_list will tell.")
        if request.last_role == "tool":
            return Text("started it")
        return ToolCalls([Call("sessions_spawn", {"task": "research the thing"})])

    model = (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(lambda r: True, Text("sub done"))
    )
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=SHIPPED_TIMERS)
        once = tmp_path / "once"
        fail = f"turn.tool_done.sessions_spawn=kill!{once}"
        async with failing_stack(values, channel, fail, tmp_path) as stack:
            await channel.say("please research the thing")
            await one_reply(stack, channel, timeout=30)
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
    assert once.exists(), "the failpoint never fired"
    assert channel.replies[0].text.startswith("The research run may have started")
    assert run_count(redis_url) == 1  # spawned once: the new attempt did not repeat it
    main_requests = [r.chat for r in fake.requests if r.chat.has_tool("sessions_spawn")]
    assert len(main_requests) == 2
    note = main_requests[-1].messages[-1]
    assert note.get("role") == "tool" and note.get("content") == INTERRUPTED


async def test_a_host_killed_mid_turn_answers_from_another_host(
    redis_url: str, tmp_path: Path
) -> None:
    killed = threading.Event()

    def answer(request: ChatRequest) -> Reply:
        return Text("answered after the host died") if killed.is_set() else Hang(120)

    async with FakeOpenAI(answer, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=SHIPPED_TIMERS)
        other = WorkerPool(env=hermetic_env(values), count=1, log_path=tmp_path / "b.log")
        other.start()
        async with Stack(values=values, adapters=[channel], workers=1, log_dir=tmp_path) as stack:
            try:
                await asyncio.sleep(5)  # the survivor's Redis watch is steady by then
                await channel.say("a question")
                pools = [stack.pool, other]
                picked: list[WorkerPool] = []  # the pool seen busy, by the look that saw it

                def busy() -> bool:
                    picked[:] = [p for p in pools if p.run_pids()][:1]
                    return bool(picked)

                await stack.wait_for(busy, timeout=20)
                victim = picked[0]
                survivor = other if victim is stack.pool else stack.pool
                victim.kill_all()  # launcher, worker (and horse): the host is gone
                killed.set()
                took = await one_reply(stack, channel, timeout=30)
                assert survivor.launcher is not None and survivor.launcher.poll() is None
            finally:
                other.stop()
    assert channel.replies[0].text == "answered after the host died"
    print(f"host killed mid-turn -> one reply in {took:.1f}s")
    assert took < 8, f"the reply took {took:.1f}s after the host died"


async def test_a_poison_pill_turn_ends_with_one_lost_line(redis_url: str, tmp_path: Path) -> None:
    model = ScriptedModel().on("crash me", Text("never seen"))
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, subagents=SHIPPED_TIMERS)
        fail = "turn.in_model_call=kill"  # every attempt dies
        async with failing_stack(values, channel, fail, tmp_path) as stack:
            await channel.say("crash me")
            await one_reply(stack, channel, timeout=60)
    assert channel.replies[0].text == (
        "⚠️ I lost this answer: the worker died 3 times. Please send it again."
    )
    assert len(fake.requests) == 3  # max_resumes (2) + 1 attempts, no more
