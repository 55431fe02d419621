"""``/subagents send`` (steer, follow-up) and durable archiving, end to end."""

from __future__ import annotations

import asyncio
import time

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Text, ToolCalls, message_text
from bot.testing.stack import Stack
from bot.types import RunStatus
from tests.e2e.conftest import stack_values
from tests.e2e.test_control_stop import fanout_model, runs_of

STEER = "[Message from the requester while you work]"


def steerable(req: ChatRequest) -> Text | ToolCalls:
    users = [message_text(m.get("content")) for m in req.messages if m.get("role") == "user"]
    said = [message_text(m.get("content")) for m in req.messages if m.get("role") == "assistant"]
    if req.last_user_message == "follow up please":
        return Text(f"follow-up of: {said[-1]}")
    steering = [u for u in users if u.startswith(STEER)]
    if steering:
        return Text("steered: " + steering[-1].removeprefix(STEER).strip())
    if req.last_role == "tool":
        return Text("not steered")
    return ToolCalls([Call("calculate", {"expression": "1+1"})], delay=2.0)


async def test_send_steers_a_running_run_then_follows_up_a_finished_one(redis_url: str) -> None:
    async with FakeOpenAI(fanout_model(steerable), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        thread = channel.thread("S")
        async with Stack(
            values=stack_values(redis_url, fake.base_url), adapters=[channel], workers=2
        ) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps
            await channel.say("spawn work", thread=thread, user="alice")
            await stack.wait_for(lambda: any(
                r.status is RunStatus.RUNNING for r in runs_of(deps, thread).values()), timeout=20)  # fmt: skip
            first = runs_of(deps, thread)["work"]
            await channel.say("/subagents send last use 6*7 instead", thread=thread, user="alice")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=20)

            await channel.say("/subagents send 1 follow up please", thread=thread, user="alice")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=20)
            runs = deps.runs.session_runs(first.session_key)
            transcript = deps.transcripts.read(first.session_id)

    steered, followed = (a.text for a in channel.announces)
    assert "Result: steered: use 6*7 instead" in steered
    # The steering message is in the run's transcript, right before what it did next.
    roles = [(m["role"], m.get("content")) for m in transcript]
    i = roles.index(("user", f"{STEER} use 6*7 instead"))
    assert roles[i + 1] == ("assistant", "steered: use 6*7 instead")
    # The follow-up is a new run on the same child session that saw the earlier work.
    assert [r.seq for r in runs] == [2, 1]
    follow = runs[0]
    assert follow.run_id != first.run_id and follow.child_session_key == first.child_session_key
    assert follow.status is RunStatus.SUCCESS
    assert 'Subagent #2 "work" (general-purpose) finished' in followed
    assert "Result: follow-up of: steered: use 6*7 instead" in followed
    assert f"id {follow.run_id[:8]}" in followed
    replies = [m.text for m in channel.replies]
    assert (
        "📨 Queued for subagent #1 · work: it reads your message before its next step." in replies
    )
    # The run read it between two steps: the reply was edited to say so.
    assert any(e.text.startswith("✅ Delivered to subagent #1 · work") for e in channel.edits)
    assert any(
        r.startswith("↪️ Subagent #1 · work had ended (success)") and "run #2" in r for r in replies
    )


async def test_archive_is_durable_across_a_restart_of_every_process(redis_url: str) -> None:
    async with FakeOpenAI(fanout_model(lambda _: Text("ok")), models=["fake-model"]) as fake:
        values = stack_values(redis_url, fake.base_url, subagents={"archive_after_minutes": 0.1})
        channel = MemoryChannel()
        thread = channel.thread("R")
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps

            def archived(label: str) -> bool:
                return runs_of(deps, thread)[label].archived_at is not None

            await channel.say("spawn keep1 gone:delete", thread=thread, user="alice")
            await stack.wait_for(lambda: len(channel.announces) == 2, timeout=20)
            await stack.wait_for(lambda: archived("gone"), timeout=5)  # delete: right away
            assert not archived("keep1")

            stack.pool.kill_all()  # every process goes down before keep1 is due (6 s)
            await stack.stop_gateway()
            keep1 = runs_of(deps, thread)["keep1"]
            due = deps.redis.zscore(deps.keys.archive_due, keep1.run_id)
            assert due is not None and keep1.ended_at is not None
            assert abs(due - (keep1.ended_at + 6)) < 0.01
            # Negative check: keep1's due time passes while no process runs.
            await asyncio.sleep(max(0.0, due - time.time()) + 1.0)
            assert not archived("keep1")  # nobody was there to do it

            stack.pool.start()
            await stack.start_gateway()
            await stack.wait_for(lambda: archived("keep1"), timeout=20)
            record = runs_of(deps, thread)["keep1"]
            live = deps.keys.transcript(record.session_id)
            assert record.archived_at is not None
            assert not deps.redis.exists(live)
            assert deps.redis.exists(f"{live}.deleted.{int(record.archived_at)}")
            await channel.say("/subagents log 1", thread=thread, user="bob")  # keep1
            await stack.wait_for(lambda: "Log of subagent #1" in channel.replies[-1].text)
    assert "• **assistant**: ok" in channel.replies[-1].text  # archived, still readable
