"""Thread-bound children on Slack, end to end: the real gateway, forked workers, bolt and
the fake Slack. ``/subagents spawn --thread`` posts a new top-level message in the channel
whose thread the child gets; a person's message there steers the running child; its answer
is announced there and, with the root's permalink (``chat.getPermalink``), in the thread it
was spawned from; ``/subagents close`` gives the thread back to the main agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from adapters.slack import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack, Posted
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values
from tests.e2e.thread_script import STEER, TASK, Gate, model

pytestmark = pytest.mark.e2e

MENTION = "<@U0FANBOT>"


@asynccontextmanager
async def running(redis_url: str, gate: Gate) -> AsyncIterator[tuple[FakeSlack, Stack]]:
    async with FakeOpenAI(model(gate)) as fake_model, FakeSlack() as fake:
        slack_values = {
            "bot_token": fake.bot_token,
            "app_token": fake.app_token,
            "signing_secret": fake.signing_secret,
            "api_url": fake.api_url,
            "socket_ping_interval": 1.0,
        }
        values = stack_values(redis_url, fake_model.base_url, slack=slack_values)
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await fake.wait_connected()
            yield fake, stack


def in_thread(slack: FakeSlack, root: str) -> list[Posted]:
    return [m for m in slack.messages if m.thread_ts == root and not m.deleted]


def has(slack: FakeSlack, root: str, part: str) -> bool:
    return any(part in m.text for m in in_thread(slack, root))


def child_root(slack: FakeSlack) -> str:
    roots = [m.ts for m in slack.messages if m.thread_ts is None and m.text.startswith("🧵")]
    return roots[0] if roots else ""


async def test_a_child_in_its_own_thread_is_steered_there_and_closed(redis_url: str) -> None:
    gate = Gate()
    async with running(redis_url, gate) as (slack, stack):
        parent = "1700000000.000100"
        spawn = f"{MENTION} /subagents spawn --thread {TASK}"
        await slack.push_event(slack.app_mention(text=spawn, ts=parent))
        await stack.wait_for(lambda: bool(child_root(slack)), timeout=20)
        root = child_root(slack)
        [opened] = [m for m in slack.messages if m.ts == root]
        assert opened.text == f"🧵 #1 general-purpose: {TASK}"
        await stack.wait_for(
            lambda: has(slack, root, "Messages in this thread go to it"), timeout=20
        )
        link = f"https://fake.slack.invalid/archives/{opened.channel}/p{root.replace('.', '')}"
        await stack.wait_for(lambda: has(slack, parent, f"works in {link}"), timeout=20)
        await asyncio.wait_for(gate.started.wait(), timeout=20)
        await slack.push_event(slack.message(text=STEER, thread_ts=root))
        await stack.wait_for(lambda: has(slack, root, "📨 Passed to subagent #1"), timeout=20)
        gate.go.set()
        await stack.wait_for(lambda: has(slack, root, "final: read"), timeout=30)
        await stack.wait_for(lambda: has(slack, parent, f"Its thread: {link}"), timeout=20)
        close = f"{MENTION} /subagents close 1"
        await slack.push_event(slack.app_mention(text=close, thread_ts=root))
        closed = "Closed the thread of subagent #1"
        await stack.wait_for(lambda: has(slack, root, closed), timeout=20)
        await slack.push_event(slack.app_mention(text=f"{MENTION} hello", thread_ts=root))
        await stack.wait_for(lambda: has(slack, root, "main agent here"), timeout=20)
    [copy] = [m.text for m in in_thread(slack, parent) if "final: read" in m.text]
    assert "Subagent #1" in copy and link in copy
    assert sum("final: read" in m.text for m in in_thread(slack, root)) == 1
