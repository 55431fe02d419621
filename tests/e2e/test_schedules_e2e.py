"""Spawn from chat, steer receipts and schedules end to end, with forked workers."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

from bot.deps import Deps
from bot.sessions import requester_session_key
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, Text, ToolCalls
from bot.testing.stack import Stack, WorkerPool, hermetic_env
from bot.types import RunRecord, RunStatus, ThreadRef
from tests.e2e.conftest import stack_values
from tests.e2e.test_control_send_archive import STEER
from tests.e2e.test_control_stop import fanout_model

ADMIN = "console:alice"


def runs(deps: Deps, thread: ThreadRef) -> list[RunRecord]:
    key = requester_session_key(agent_id="main", thread=thread)
    return sorted(deps.runs.session_runs(key), key=lambda r: r.seq)


def answer(req: ChatRequest) -> Text | ToolCalls:
    steering = [
        m.get("content", "")
        for m in req.messages
        if m.get("role") == "user" and str(m.get("content", "")).startswith(STEER)
    ]
    if steering:
        return Text("steered: " + str(steering[-1]).removeprefix(STEER).strip())
    if "slow" in req.last_user_message and req.last_role != "tool":
        return ToolCalls([Call("calculate", {"expression": "1+1"})], delay=2.0)
    return Text(f"done: {req.last_user_message[:40]}")


def values(redis_url: str, base_url: str) -> dict[str, object]:
    return stack_values(
        redis_url,
        base_url,
        admins=[ADMIN],
        schedules={"min_interval_seconds": 1, "late_after_seconds": 2},
    )


async def test_spawn_from_chat_announces_and_a_steer_receipt_is_edited(redis_url: str) -> None:
    async with FakeOpenAI(fanout_model(answer), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        thread = channel.thread("S")
        async with Stack(values=values(redis_url, fake.base_url), adapters=[channel]) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps
            await channel.say(
                "/subagents spawn explore slow map the repo", thread=thread, user="bob"
            )
            await stack.wait_for(lambda: any(r.status is RunStatus.RUNNING for r in runs(deps, thread)), timeout=20)  # fmt: skip
            await channel.say("/subagents send 1 focus on tests", thread=thread, user="bob")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=30)
            await stack.wait_for(lambda: len(channel.edits) >= 1, timeout=10)
            (run,) = runs(deps, thread)

    replies = [m.text for m in channel.replies]
    assert replies[0] == "🚀 Started subagent #1 (explore): slow map the repo"
    assert replies[1] == (
        "📨 Queued for subagent #1 · slow map the repo: it reads your message before its next step."
    )
    assert len(replies) == 2  # the gateway's own copy of the queued reply was not posted again
    (edit,) = [e for e in channel.edits if "Delivered" in e.text]
    assert edit.text == (
        "✅ Delivered to subagent #1 · slow map the repo: it read your message between two steps."
    )
    assert run.requester == "console:bob" and run.subagent_type == "explore"
    (announce,) = channel.announces
    assert 'Subagent #1 "slow map the repo" (explore) finished' in announce.text
    assert "Result: steered: focus on tests" in announce.text


def pools(stack: Stack, n: int) -> Iterator[WorkerPool]:
    env = hermetic_env(stack.values)
    for i in range(n):
        yield WorkerPool(env=env, count=1, log_path=stack.log_dir / f"launcher-{i}.log")


async def test_a_schedule_fires_once_per_tick_with_three_workers_and_once_after_an_outage(
    redis_url: str,
) -> None:
    async with FakeOpenAI(fanout_model(answer), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        thread = channel.thread("R")
        async with Stack(
            values=values(redis_url, fake.base_url), adapters=[channel], workers=0
        ) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps
            launchers = [p.start() for p in pools(stack, 3)]
            try:  # schedule once the launchers sweep: the first tick is then on time too
                await stack.wait_for(lambda: bool(deps.redis.exists(deps.keys.reaper_lock)), timeout=30)  # fmt: skip
                await channel.say("/subagents every 3s ping the build", thread=thread, user="alice")
                await stack.wait_for(lambda: len(runs(deps, thread)) >= 4, timeout=30)
                (schedule,) = deps.schedules.all()
                await asyncio.to_thread(lambda: [p.stop() for p in launchers])
                on_time = runs(deps, thread)
                fired = deps.schedules.all()[0].fired

                await asyncio.sleep(8)  # all workers down: two or three ticks pass unfired
                assert len(runs(deps, thread)) == len(on_time)
                restarted = time.time()
                launchers = [p.start() for p in pools(stack, 1)]
                await stack.wait_for(lambda: len(runs(deps, thread)) > len(on_time), timeout=20)
                await asyncio.sleep(4.0)  # past the next tick: on-time firings carry on
                after = [r for r in runs(deps, thread) if r.created_at >= restarted]
                await stack.wait_for(
                    lambda: len(channel.announces) >= len(on_time) + len(after), timeout=30
                )
            finally:
                await asyncio.to_thread(lambda: [p.stop() for p in launchers])

    assert channel.replies[0].text.startswith("⏰ Schedule #1: every 3s, first at ")
    # Three sweeping launchers: one run per tick, ticks 3 s apart, none twice.
    assert fired == len(on_time)
    starts = [r.created_at for r in on_time]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(gap > 2.0 for gap in gaps), gaps
    assert all(r.requester == ADMIN and r.task == "ping the build" for r in on_time)
    assert all(not r.warnings for r in on_time)
    # After the outage: one late firing for all the missed ticks, saying so; then the
    # schedule is back on its ticks (the first may follow the late one closely).
    late = after[0]
    assert [r for r in after if r.warnings] == [late]
    regular = [r.created_at for r in after[1:]]
    assert all(b - a > 2.0 for a, b in itertools.pairwise(regular)), regular
    assert len(after) <= 3
    assert late.warnings[0].startswith(f"schedule #{schedule.schedule_id} fired ")
    assert "late: workers were down" in late.warnings[0]
    late_announce = [a.text for a in channel.announces if f"id {late.run_id[:8]}" in a.text]
    assert late_announce and "late: workers were down" in late_announce[0]


async def test_on_telegram_spawn_and_the_receipt_edit_use_the_bot_api(redis_url: str) -> None:
    from tests.e2e.test_telegram_e2e import BOT, FORUM, running

    async with running(redis_url, fanout_model(answer)) as env:
        tg = env.tg
        say = f"/subagents{BOT} spawn explore slow map the repo"
        tg.push(tg.message(chat=FORUM, text=say, thread_id=11))
        await env.stack.wait_for(lambda: any("🚀" in t for t in env.texts()), timeout=20)
        await asyncio.sleep(0.5)  # the run is between its two model calls
        tg.push(tg.message(chat=FORUM, text=f"/subagents{BOT} send 1 focus on tests", thread_id=11))
        await env.stack.wait_for(
            lambda: any(t.startswith("✅ Delivered") for t in env.texts()), timeout=30
        )
        await env.stack.wait_for(
            lambda: any("Result: steered: focus on tests" in t for t in env.texts()), timeout=30
        )
        await env.stack.wait_for(env.drained)
    started = next(m for m in tg.messages if m.text.startswith("🚀"))
    assert started.text == "🚀 Started subagent #1 (explore): slow map the repo"
    assert started.message_thread_id == 11
    (receipt,) = [m for m in tg.messages if "focus on tests" not in m.text and m.edits and "Delivered" in m.text]  # fmt: skip
    assert receipt.edits == [
        "✅ Delivered to subagent #1 · slow map the repo: it read your message between two steps."
    ]
    assert receipt.message_thread_id == 11
    edits = [c for c in tg.calls_to("editMessageText") if c.params["message_id"] == receipt.message_id]  # fmt: skip
    assert len(edits) == 1


async def test_on_slack_spawn_and_the_receipt_edit_use_the_web_api(redis_url: str) -> None:
    from tests.e2e.test_slack_e2e import MENTION, running

    async with running(redis_url, fanout_model(answer)) as env:
        slack = env.slack
        first = slack.app_mention(text=f"{MENTION} /subagents spawn explore slow map the repo")
        root = first["ts"]
        await slack.wait_ack(await slack.push_event(first))
        await env.stack.wait_for(lambda: any("🚀" in m.text for m in slack.messages), timeout=20)
        await asyncio.sleep(0.5)  # the run is between its two model calls
        steer = slack.app_mention(
            text=f"{MENTION} /subagents send 1 focus on tests", thread_ts=root
        )
        await slack.wait_ack(await slack.push_event(steer))
        await env.stack.wait_for(
            lambda: any("Result: steered: focus on tests" in m.text for m in slack.messages),
            timeout=30,
        )
        await env.stack.wait_for(lambda: any(m.text.startswith("✅ Delivered") for m in slack.messages), timeout=10)  # fmt: skip
        await env.stack.wait_for(env.drained)
    started = next(m for m in slack.messages if m.text.startswith("🚀"))
    assert started.text == "🚀 Started subagent #1 (explore): slow map the repo"
    assert started.thread_ts == root
    (receipt,) = [m for m in slack.messages if m.text.startswith("✅ Delivered")]
    assert receipt.thread_ts == root
    assert receipt.edits and receipt.edits[0].startswith("📨 Queued for subagent #1")
    updated = [c for c in slack.calls_to("chat.update") if c.args["ts"] == receipt.ts]
    assert len(updated) == 1
