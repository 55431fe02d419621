"""Slack end to end: the real gateway, forked workers, the Slack adapter and the fake Slack.

Every test runs one :class:`~bot.testing.stack.Stack` with the adapter built from the same
settings values as the workers, against :class:`~bot.testing.fake_slack.FakeSlack` (which
echoes the bot's own posts back as events, as a real workspace subscribed to
``message.*`` does) and the scripted fake model.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from rq import Queue

from adapters.slack import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack, Posted
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

CHANNEL = "C0GENERAL"
MENTION = "<@U0FANBOT>"
_SPAWN = re.compile(r"spawn (\w+)(?: (\d))?")

MARK = r"\b[pc]\d{3}-\d{3}\b"
"""A line mark of the long text; whole words only, so a UUID in the announce's footer
(``…5c946-4675…``) is never taken for one."""


def spoken(request: ChatRequest) -> str:
    """The user's words in a main-agent request (``"<speaker>: <text>"`` -> ``<text>``)."""
    return request.last_user_message.partition(": ")[2]


def main_agent(request: ChatRequest) -> Reply:
    """``spawn <topic> [n]`` fans out n (default 1) subagents; anything else is echoed."""
    found = _SPAWN.search(spoken(request))
    if found is None:
        return Text(f"echo: {spoken(request)}")
    topic, count = found[1], int(found[2] or 1)
    if request.last_role == "tool":
        return Text(f"Started {topic}.")
    calls = [
        Call("sessions_spawn", {"task": f"{topic} task {i}", "label": f"{topic}-{i}"})
        for i in range(count)
    ]
    return ToolCalls(calls)


def model(subagent: Any = None) -> ScriptedModel:
    """The main agent above plus a subagent answering ``result of <task>`` (or ``subagent``)."""
    default = lambda r: Text(f"result of {r.last_user_message}", delay=0.3)  # noqa: E731
    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main_agent)
        .on(_is_subagent, subagent or default)
    )


@dataclass
class Env:
    slack: FakeSlack
    model: FakeOpenAI
    stack: Stack
    values: dict[str, Any]

    def main_requests(self) -> list[ChatRequest]:
        return [r.chat for r in self.model.requests if not _is_subagent(r.chat)]

    def turn_jobs(self) -> int:
        """RQ jobs ever enqueued on ``turns`` in this test (Redis is flushed per test)."""
        client = redis.Redis.from_url(self.values["redis_url"])
        try:
            keys = [k for k in client.scan_iter("rq:job:*") if k.count(b":") == 2]
            return sum(client.hget(k, "origin") == b"turns" for k in keys)
        finally:
            client.close()

    def turns_idle(self) -> bool:
        client = redis.Redis.from_url(self.values["redis_url"])
        try:
            queue = Queue("turns", connection=client)
            return queue.count == 0 and queue.started_job_registry.count == 0
        finally:
            client.close()

    async def drained(self) -> bool:
        """Every outbox entry read and acknowledged (nothing left to deliver)."""
        gateway = self.stack.gateway
        assert gateway is not None
        return await gateway.egress.drained()


@asynccontextmanager
async def running(
    redis_url: str,
    script: ScriptedModel,
    *,
    workers: int = 2,
    slack: dict[str, Any] | None = None,
    **extra: Any,
) -> AsyncIterator[Env]:
    async with FakeOpenAI(script) as fake_model, FakeSlack(echo_bot_messages=True) as fake:
        slack_values = {
            "bot_token": fake.bot_token,
            "app_token": fake.app_token,
            "signing_secret": fake.signing_secret,
            "api_url": fake.api_url,
            "socket_ping_interval": 1.0,
            **(slack or {}),
        }
        values = stack_values(redis_url, fake_model.base_url, slack=slack_values, **extra)
        adapter = build(Settings(**values))
        async with Stack(values=values, adapters=[adapter], workers=workers) as stack:
            if slack_values.get("mode", "socket") == "socket":
                await fake.wait_connected()
            yield Env(slack=fake, model=fake_model, stack=stack, values=values)


def announces(messages: list[Posted]) -> list[Posted]:
    return [m for m in messages if re.search(r"Subagent #\d+ .* finished", m.text)]


def statuses(messages: list[Posted]) -> list[Posted]:
    """Status messages: posted as ``⏳ …`` and edited (finally ``✅ … — success``)."""
    return [m for m in messages if (m.edits or [m.text])[0].startswith("⏳")]


def finished_statuses(messages: list[Posted]) -> list[Posted]:
    return [m for m in statuses(messages) if m.text.startswith("✅") and "— success" in m.text]


async def test_mention_opens_a_thread_for_reply_status_and_announce(redis_url: str) -> None:
    async with running(redis_url, model()) as env:
        slack = env.slack
        mention = slack.app_mention(text=f"{MENTION} spawn alpha")
        root = mention["ts"]
        await slack.wait_ack(await slack.push_event(mention))
        await env.stack.wait_for(
            lambda: (
                len(announces(slack.messages)) == 1
                and len(finished_statuses(slack.messages)) == 1
                and any(m.text == "Started alpha." for m in slack.messages)
            ),
            timeout=40,
        )
        await env.stack.wait_for(env.drained)
    assert [(m.channel, m.thread_ts) for m in slack.messages] == [(CHANNEL, root)] * 3
    assert slack.thread(CHANNEL, None) == []  # nothing at the channel root
    [announce] = announces(slack.messages)
    assert "Status: success" in announce.text
    assert "Result: result of alpha task 0" in announce.text
    [status] = statuses(slack.messages)
    assert "alpha-0" in status.text
    updates = slack.calls_to("chat.update")
    assert updates and {(c.args["channel"], c.args["ts"]) for c in updates} == {
        (CHANNEL, status.ts)
    }
    # typing() while the turn runs: the assistant status of that very thread.
    assert slack.statuses and {s["thread_ts"] for s in slack.statuses} == {root}
    assert len(env.main_requests()) == 2  # spawn, then the confirmation after the tool result


async def test_two_threads_interleaved_never_cross(redis_url: str) -> None:
    async with running(redis_url, model(), workers=3) as env:
        slack = env.slack
        roots = {}
        for topic in ("alpha", "beta"):
            mention = slack.app_mention(text=f"{MENTION} spawn {topic} 2")
            roots[topic] = mention["ts"]
            await slack.push_event(mention)
        # A follow-up in each thread, without a mention, while the runs are going (once
        # the first turns committed: a thread continues only when it has a session).
        await env.stack.wait_for(
            lambda: {"Started alpha.", "Started beta."} <= {m.text for m in slack.messages},
            timeout=30,
        )
        for topic in ("beta", "alpha"):
            await slack.push_event(slack.message(text=f"and {topic} more?", thread_ts=roots[topic]))
        await env.stack.wait_for(
            lambda: (
                len(announces(slack.messages)) == 4
                and len(finished_statuses(slack.messages)) == 4
                and sum(m.text.startswith("echo: ") for m in slack.messages) == 2
            ),
            timeout=60,
        )
        await env.stack.wait_for(env.drained)
    for topic, other in (("alpha", "beta"), ("beta", "alpha")):
        thread = slack.thread(CHANNEL, roots[topic])
        assert all(other not in m.text for m in thread), [m.text for m in thread]
        texts = [m.text for m in thread]
        assert f"Started {topic}." in texts
        assert f"echo: and {topic} more?" in texts
        assert sorted(re.findall(rf"Result: result of {topic} task (\d)", " ".join(texts))) == [
            "0",
            "1",
        ]
        assert sorted(re.search(r"-(\d)", s.text)[1] for s in statuses(thread)) == ["0", "1"]  # type: ignore[index]
        assert len(thread) == 1 + 1 + 2 + 2  # reply, follow-up answer, 2 statuses, 2 announces
    assert slack.thread(CHANNEL, None) == []
    status_ts = {m.ts: m.thread_ts for m in statuses(slack.messages)}
    assert all(c.args["ts"] in status_ts for c in slack.calls_to("chat.update"))
    # The follow-up of each thread saw that thread's history only.
    for request in env.main_requests():
        words = " ".join(str(m.get("content") or "") for m in request.messages[1:])
        assert not ("alpha" in words and "beta" in words), words


async def test_reply_in_thread_without_mention_continues_the_session(redis_url: str) -> None:
    async with running(redis_url, model()) as env:
        slack = env.slack
        mention = slack.app_mention(text=f"{MENTION} remember pineapple")
        root = mention["ts"]
        await slack.push_event(mention)
        await env.stack.wait_for(lambda: len(slack.messages) == 1, timeout=30)
        # Unaddressed chatter at the channel root is not for the bot.
        chatter = await slack.push_event(slack.message(text="random chatter"))
        await slack.wait_ack(chatter)
        follow_up = slack.message(text="what did I ask you to remember?", thread_ts=root)
        await slack.push_event(follow_up)
        await env.stack.wait_for(lambda: len(slack.messages) == 2, timeout=30)
        await env.stack.wait_for(env.drained)
    assert [m.text for m in slack.thread(CHANNEL, root)] == [
        "echo: remember pineapple",
        "echo: what did I ask you to remember?",
    ]
    _, second = env.main_requests()
    history = [(m["role"], m["content"]) for m in second.messages if m["role"] != "system"]
    assert history == [
        ("user", "U0HUMAN01: remember pineapple"),
        ("assistant", "echo: remember pineapple"),
        ("user", "U0HUMAN01: what did I ask you to remember?"),
    ]
    assert not any("random chatter" in r.last_user_message for r in env.main_requests())
    assert env.turn_jobs() == 2


async def test_retry_and_double_delivery_run_one_turn(redis_url: str) -> None:
    async with running(redis_url, model()) as env:
        slack = env.slack
        mention = slack.app_mention(text=f"{MENTION} only once")
        first = await slack.push_event(mention)
        await slack.wait_ack(first)
        retry = await slack.redeliver(first, reason="timeout")
        as_message = await slack.push_event(
            slack.message(text=f"{MENTION} only once", ts=mention["ts"])
        )
        for envelope in (retry, as_message):
            await slack.wait_ack(envelope)  # acked after the gateway took (or dropped) it
        await env.stack.wait_for(lambda: len(slack.messages) == 1, timeout=30)
        await env.stack.wait_for(env.turns_idle)
        await env.stack.wait_for(env.drained)
    assert retry.body["retry_attempt"] == 1
    assert [m.text for m in slack.thread(CHANNEL, mention["ts"])] == ["echo: only once"]
    assert env.turn_jobs() == 1
    assert len(env.main_requests()) == 1


async def test_http_mode_rejects_bad_requests_dedupes_retries_and_serves_commands(
    redis_url: str,
) -> None:
    port = free_port()
    async with running(
        redis_url,
        model(),
        slack={"mode": "http", "app_token": None},
        gateway={"http_host": LOOPBACK, "http_port": port},
    ) as env:
        slack = env.slack
        url = f"http://{LOOPBACK}:{port}/slack/events"

        def body(text: str) -> dict[str, Any]:
            return slack.event_body(slack.app_mention(text=f"{MENTION} {text}"))

        forged = await slack.deliver_http(url, body("forged"), secret="not-the-secret")
        stale = await slack.deliver_http(url, body("stale"), timestamp=int(time.time()) - 600)
        malformed = await slack.deliver_http(url, '{"type": "event_callback", "event": {')
        assert (forged.status, stale.status, malformed.status) == (401, 401, 400)

        good = body("over http")
        first = await slack.deliver_http(url, good)
        again = await slack.deliver_http(url, good, retry_num=1)
        assert (first.status, again.status) == (200, 200)
        # The slash command carries no thread: answered by the router, ephemerally.
        command = await slack.deliver_http(url, slack.command_body(text="list"), form=True)
        assert command.status == 200
        await env.stack.wait_for(lambda: len(slack.messages) == len(slack.ephemerals) == 1)
        await env.stack.wait_for(env.turns_idle)
        await env.stack.wait_for(env.drained)
    root = good["event"]["ts"]
    assert [(m.text, m.thread_ts) for m in slack.messages] == [("echo: over http", root)]
    [answer] = slack.ephemerals
    assert (answer.channel, answer.thread_ts, answer.ephemeral_to) == (CHANNEL, None, "U0HUMAN01")
    assert [spoken(r) for r in env.main_requests()] == ["over http"]
    assert env.turn_jobs() == 1
    assert slack.connections == 0  # HTTP mode opens no socket


async def test_rate_limited_post_is_delivered_after_retry_after_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.gateway.egress")
    # Retry-After 2 s is beyond what the client waits itself: the outbox must retry.
    async with running(redis_url, model(), slack={"rate_limit_wait_max_seconds": 0.5}) as env:
        slack = env.slack
        slack.fail("chat.postMessage", status=429, retry_after=2)
        mention = slack.app_mention(text=f"{MENTION} hello")
        await slack.push_event(mention)
        await env.stack.wait_for(lambda: len(slack.messages) == 1, timeout=30)
        await env.stack.wait_for(env.drained)
    assert [(m.text, m.thread_ts) for m in slack.messages] == [("echo: hello", mention["ts"])]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 200]
    retries = [r.getMessage() for r in caplog.records if r.name == "bot.gateway.egress"]
    assert any(re.search(r"retry 1 in 2\.0s", m) for m in retries), retries


def big_result(target: int = 50_000) -> str:
    """Prose paragraphs (``pNNN-LLL`` lines) and code blocks (``cNNN-LLL`` lines) in turns;
    block 5 is longer than a message, so a cut inside a code block is exercised too."""
    pieces: list[str] = []
    block = 0
    while sum(map(len, pieces)) < target:
        prose = [f"p{block:03d}-{i:03d} lorem ipsum dolor sit amet consectetur" for i in range(8)]
        code = [
            f"c{block:03d}-{i:03d} = compute({i}, 'padding padding')"
            for i in range(150 if block == 5 else 30)
        ]
        pieces.append("\n".join(prose) + "\n\n```python\n" + "\n".join(code) + "\n```\n\n")
        block += 1
    return "".join(pieces).strip()


@pytest.mark.parametrize("limited", [False, True], ids=["", "429-midway"])
async def test_fifty_thousand_character_result_arrives_in_order_with_code_intact(
    redis_url: str, limited: bool
) -> None:
    result = big_result()
    assert len(result) >= 50_000
    expected = re.findall(MARK, result)
    sub = lambda _r: Text(result, delay=0.1)  # noqa: E731
    # 429-midway: the 7th post (after the reply, the status and five announce parts) is
    # rate limited for longer than the client waits, so the outbox retries the announce;
    # the parts already posted must not be posted again.
    opts = {"rate_limit_wait_max_seconds": 0.5} if limited else {}
    async with running(
        redis_url, model(sub), slack=opts, subagents={"max_result_chars": 60_000}
    ) as env:
        slack = env.slack
        if limited:
            slack.fail("chat.postMessage", status=429, retry_after=2, after=6)
        mention = slack.app_mention(text=f"{MENTION} spawn big")
        root = mention["ts"]
        await slack.push_event(mention)
        await env.stack.wait_for(
            lambda: (
                any("runtime " in m.text for m in slack.messages)
                and len(finished_statuses(slack.messages)) == 1
            ),
            timeout=60,
        )
        await env.stack.wait_for(env.drained)
    thread = slack.thread(CHANNEL, root)
    assert len(thread) == len(slack.messages)  # everything in the thread
    status = statuses(thread)
    parts = [m for m in thread if m not in status and m.text != "Started big."]
    assert parts[0].text.startswith("✅ Subagent #1")
    assert "runtime " in parts[-1].text
    assert len(parts) >= 10
    assert all(len(p.text) <= 3_900 for p in parts)
    assert re.findall(MARK, "\n".join(p.text for p in parts)) == expected
    posts = [c.status for c in slack.calls_to("chat.postMessage")]
    assert posts == (
        [200] * 6 + [429] + [200] * (len(parts) - 4) if limited else [200] * (len(parts) + 2)
    )
    for part in parts:  # every part renders on its own: code lines inside fences, prose out
        inside = False
        for line in part.text.splitlines():
            if line.startswith("```"):
                inside = not inside
            elif re.match(r"[pc]\d{3}-\d{3}", line):
                assert inside == line.startswith("c"), (line, part.text[:200])
        assert not inside, "a part ends inside an open code block"


async def test_socket_refresh_mid_run_reconnects_and_the_announce_lands(redis_url: str) -> None:
    release = asyncio.Event()

    async def slow_subagent(request: ChatRequest) -> Reply:
        await release.wait()
        return Text(f"result of {request.last_user_message}")

    async with running(redis_url, model(slow_subagent)) as env:
        slack = env.slack
        mention = slack.app_mention(text=f"{MENTION} spawn gamma")
        root = mention["ts"]
        await slack.push_event(mention)
        await env.stack.wait_for(
            lambda: (
                any(m.text == "Started gamma." for m in slack.messages)
                and len(statuses(slack.messages)) == 1
            ),
            timeout=30,
        )
        await slack.disconnect("refresh_requested")
        await slack.wait_connected(2)
        release.set()
        await env.stack.wait_for(lambda: len(announces(slack.messages)) == 1, timeout=30)
        after = await slack.push_event(slack.message(text="thanks", thread_ts=root))
        await slack.wait_ack(after)
        await env.stack.wait_for(
            lambda: (
                any(m.text == "echo: thanks" for m in slack.messages)
                and len(finished_statuses(slack.messages)) == 1
            ),
            timeout=30,
        )
        await env.stack.wait_for(env.drained)
    assert after.connection == 2
    assert len(slack.calls_to("apps.connections.open")) == 2
    [announce] = announces(slack.messages)
    assert announce.thread_ts == root and "Result: result of gamma task 0" in announce.text
    assert {m.thread_ts for m in slack.messages} == {root}
    # The follow-up turn sees the subagent's result in the session history.
    last = env.main_requests()[-1]
    assert any("result of gamma task 0" in str(m.get("content")) for m in last.messages[:-1])
