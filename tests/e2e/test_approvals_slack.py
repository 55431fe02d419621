"""Approvals on Slack, end to end: the real gateway, forked workers, bolt and the fake Slack.
The request carries Block Kit buttons; a press arrives as a ``block_actions`` payload over
Socket Mode or signed over the HTTP interactivity endpoint; a refusal is ephemeral; the
request is edited (``chat.update``, buttons gone) and the run resumes as a new job."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.slack import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack, Posted
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.stack import Stack
from tests.e2e.approvals_script import model
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

MENTION = "<@U0FANBOT>"
ANN = "U0HUMAN01"  # the default sender: starts the runs
BOB = "U0BOB0001"  # neither requester nor admin


@asynccontextmanager
async def running(
    redis_url: str, *, slack: dict[str, Any] | None = None, **extra: Any
) -> AsyncIterator[tuple[FakeSlack, Stack]]:
    async with FakeOpenAI(model()) as fake_model, FakeSlack() as fake:
        slack_values = {
            "bot_token": fake.bot_token,
            "app_token": fake.app_token,
            "signing_secret": fake.signing_secret,
            "api_url": fake.api_url,
            "socket_ping_interval": 1.0,
            **(slack or {}),
        }
        values = stack_values(
            redis_url,
            fake_model.base_url,
            slack=slack_values,
            tools={"require_approval": ["calculate"]},
            **extra,
        )
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            if slack_values.get("mode", "socket") == "socket":
                await fake.wait_connected()
            yield fake, stack


def request_of(slack: FakeSlack) -> Posted | None:
    return next((m for m in slack.messages if (m.edits or [m.text])[0].startswith("🔐")), None)


def announce(slack: FakeSlack) -> str:
    found = [m.text for m in slack.messages if re.search(r"Subagent #\d+ .* finished", m.text)]
    return found[0] if found else ""


async def parked_request(slack: FakeSlack, stack: Stack) -> tuple[Posted, str]:
    await slack.push_event(slack.app_mention(text=f"{MENTION} go"))
    await stack.wait_for(lambda: request_of(slack) is not None, timeout=30)
    sent = request_of(slack)
    assert sent is not None
    found = re.search(r"\bid `?([0-9a-f]{8})\b", sent.text)
    assert found is not None, sent.text
    return sent, found[1]


async def test_socket_mode_refuses_others_and_resumes_after_the_worker_died(
    redis_url: str,
) -> None:
    async with running(redis_url) as (slack, stack):
        sent, approval_id = await parked_request(slack, stack)
        assert [b["text"]["text"] for b in sent.buttons()] == ["✅ Approve", "❌ Deny"]
        assert [b.get("style") for b in sent.buttons()] == ["primary", "danger"]
        env = await slack.push_interactive(slack.press(sent, f"!approve {approval_id}", user=BOB))
        await slack.wait_ack(env)
        await stack.wait_for(lambda: len(slack.ephemerals) == 1, timeout=15)
        assert sent.buttons()  # still waiting
        first = stack.pool.worker_pids()
        stack.pool.kill_all()  # the host dies while the run waits: no job holds it
        stack.pool.start()
        env = await slack.push_interactive(slack.press(sent, f"!approve {approval_id}", user=ANN))
        await slack.wait_ack(env)
        await stack.wait_for(lambda: "answer: 42" in announce(slack), timeout=40)
    [refusal] = slack.ephemerals
    assert refusal.ephemeral_to == BOB and "only the person who started" in refusal.text
    assert refusal.thread_ts == sent.thread_ts
    assert sent.text.startswith("✅") and f"approved by @{ANN}" in sent.text
    assert sent.buttons() == []
    assert set(stack.pool.worker_pids()).isdisjoint(first)


async def test_http_interactivity_is_signed_and_denies(redis_url: str) -> None:
    port = free_port()
    async with running(
        redis_url,
        slack={"mode": "http", "app_token": None},
        gateway={"http_host": LOOPBACK, "http_port": port},
    ) as (slack, stack):
        url = f"http://{LOOPBACK}:{port}/slack/events"
        body = slack.event_body(slack.app_mention(text=f"{MENTION} go"))
        assert (await slack.deliver_http(url, body)).status == 200
        await stack.wait_for(lambda: request_of(slack) is not None, timeout=30)
        sent = request_of(slack)
        assert sent is not None
        approval_id = re.findall(r"\bid `?([0-9a-f]{8})\b", sent.text)[0]
        form = {"payload": json.dumps(slack.press(sent, f"!deny {approval_id}"))}
        forged = await slack.deliver_http(url, form, form=True, secret="not-the-secret")
        stale = await slack.deliver_http(url, form, form=True, timestamp=int(time.time()) - 600)
        assert (forged.status, stale.status) == (401, 401)
        assert sent.buttons()  # nothing decided by an unsigned press
        assert (await slack.deliver_http(url, form, form=True)).status == 200
        await stack.wait_for(lambda: f"denied by @{ANN}" in announce(slack), timeout=40)
    assert sent.text.startswith("❌") and sent.buttons() == []
    assert slack.ephemerals == []  # a press that decided gets no extra message


async def test_no_answer_in_time_means_deny(redis_url: str) -> None:
    async with running(redis_url, approvals={"timeout_seconds": 2}) as (slack, stack):
        sent, _ = await parked_request(slack, stack)
        await stack.wait_for(lambda: "nobody answered in time" in announce(slack), timeout=40)
    assert sent.text.startswith("⌛") and sent.buttons() == []


async def test_a_reply_with_new_arguments(redis_url: str) -> None:
    async with running(redis_url) as (slack, stack):
        sent, approval_id = await parked_request(slack, stack)
        args = json.dumps({"expression": "2+2"})
        reply = slack.message(text=f"!approve {approval_id} {args}", thread_ts=sent.thread_ts)
        await slack.push_event(reply)
        await stack.wait_for(lambda: "answer: 4" in announce(slack), timeout=40)
    assert "approved with edited arguments" in sent.text
