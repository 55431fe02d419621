"""The ops page in a real headless Chromium against a running stack.

Forked workers run a fan-out (one quick run that ends, one running, one waiting for the
concurrency slot); the turn's reply is dead-lettered by a channel that refuses it. The
browser signs in with the admin token through the form, sees the runs, the queues, the
workers and the dead letter, clicks Replay, and the reply is delivered. Screenshots (phone
and desktop) go to a temp directory whose path is printed; they are never committed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import redis

from bot.errors import DeliveryError
from bot.keys import Keys
from bot.ports import PartLog
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.netutil import LOOPBACK
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from bot.types import Outbound, OutboundKind, RunStatus, Usage
from tests.browser_support import chromium, find_chromium
from tests.e2e.conftest import stack_values

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs the chromium package (apt-get install chromium)"
)

ADMIN = "admin-token-for-the-browser-test"
VIEW = "view-token-for-the-browser-test"


class RefusesReplies(MemoryChannel):
    """Refuses the turn's reply for good (a dead letter) until ``refusing`` is cleared."""

    refusing = True

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        if self.refusing and message.kind is OutboundKind.REPLY:
            raise DeliveryError("channel_not_found", permanent=True)
        return await super().send(message, parts=parts)


def fan_out() -> ScriptedModel:
    tasks = ["quick lookup", "slow survey A", "slow survey B"]

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started 3 runs.")
        return ToolCalls([Call("sessions_spawn", {"task": t, "label": t}) for t in tasks])

    def subagent(req: ChatRequest) -> Text:
        slow = "slow" in req.last_user_message
        usage = Usage(prompt_tokens=1200, completion_tokens=300)
        return Text(f"done: {req.last_user_message}", delay=60 if slow else 0, usage=usage)

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


def statuses(stack: Stack) -> list[RunStatus]:
    client = redis.Redis.from_url(stack.settings.redis_url)
    try:
        runs = RunsRegistry(redis=client, keys=Keys(prefix=stack.settings.key_prefix)).all()
    finally:
        client.close()
    return sorted(r.status for r in runs)


def dead_letters(stack: Stack) -> int:
    client = redis.Redis.from_url(stack.settings.redis_url)
    try:
        return int(client.xlen(Keys(prefix=stack.settings.key_prefix).dead_letter))
    finally:
        client.close()


async def test_the_ops_page_in_chromium_shows_the_stack_and_replays_a_dead_letter(
    redis_url: str,
) -> None:
    assert CHROMIUM is not None
    shots = Path(tempfile.mkdtemp(prefix="fanbot-ops-screenshots-"))
    async with FakeOpenAI(fan_out(), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            prices={"fake-model": {"input": 1.0, "output": 2.0}},
            subagents={"max_concurrent": 1, "shutdown_grace_seconds": 0.5},
            gateway={"http_host": LOOPBACK, "http_port": 0},  # any free port
            ops={"token": VIEW, "admin_token": ADMIN, "refresh_seconds": 0},
        )
        channel = RefusesReplies()
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("survey three things")
            expected = [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUCCESS]
            await stack.wait_for(lambda: sorted(statuses(stack)) == expected, timeout=40)
            await stack.wait_for(lambda: dead_letters(stack) == 1, timeout=30)
            assert stack.gateway is not None
            port = stack.gateway.http_port

            async with chromium(CHROMIUM) as page:
                await page.viewport(390, 844, mobile=True)  # a phone
                await page.goto(f"http://{LOOPBACK}:{port}/ops")
                assert await page.evaluate("document.title") == "fanbot ops: sign in"
                await page.type("#token", ADMIN)
                await page.click("button[type=submit]")
                assert await page.evaluate("document.title") == "fanbot ops"
                assert await page.evaluate("document.cookie") == ""  # HttpOnly

                runs = await page.evaluate(
                    "Object.fromEntries([...document.querySelectorAll('tr.run')].map("
                    "r => [r.dataset.status, r.querySelector('.queue-pos').innerText.trim()]))"
                )
                assert runs == {"success": "–", "running": "–", "queued": "#1"}
                [success] = await page.texts("tr.run[data-status=success]")
                assert "quick lookup" in success and "$0.0018" in success
                assert "1.5k (in 1.2k / out 300)" in success
                subagents = await page.evaluate(
                    "document.querySelector('tr[data-queue=subagents]').innerText"
                )
                assert "subagents" in subagents
                workers = await page.texts("tr[data-worker]")
                assert len(workers) == 2 and any("busy" in w for w in workers)
                [letter] = await page.texts("tr[data-dead]")
                assert "Started 3 runs." in letter and "channel_not_found" in letter
                phone = await page.screenshot(shots / "ops-phone.png")

                channel.refusing = False  # the cause is fixed; now replay
                await page.click("tr[data-dead] button.replay")
                assert "Replayed 1 dead letter(s)" in await page.evaluate(
                    "document.querySelector('#flash').innerText"
                )
                assert await page.texts("tr[data-dead]") == []
                await stack.wait_for(lambda: len(channel.replies) == 1, timeout=30)
                assert channel.replies[0].text == "Started 3 runs."
                assert dead_letters(stack) == 0

                await page.viewport(1280, 900, mobile=False)
                await page.goto(f"http://{LOOPBACK}:{port}/ops")
                desktop = await page.screenshot(shots / "ops-desktop.png")
    print(f"ops page screenshots: {phone} {desktop}")
    assert phone.stat().st_size > 10_000 and desktop.stat().st_size > 10_000
