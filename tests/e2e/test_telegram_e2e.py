"""Telegram end to end: the real gateway, forked workers, PTB and the fake Bot API.

Every test runs one :class:`~bot.testing.stack.Stack` with the adapter built from the same
settings values as the workers, against :class:`~bot.testing.fake_telegram.FakeTelegram`
and the scripted fake model.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from aiohttp import ClientSession
from rq import Queue

from adapters.telegram import build
from adapters.telegram.channel import SECRET_HEADER
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, SentMessage, forum, group
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent
from bot.testing.stack import Stack
from bot.text.chunking import utf16_len
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

FORUM = forum()
GROUP = group()
BOT = "@fanbot_bot"
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


def model() -> ScriptedModel:
    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main_agent)
        .on(_is_subagent, lambda r: Text(f"result of {r.last_user_message}", delay=0.3))
    )


@dataclass
class Env:
    tg: FakeTelegram
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

    def texts(self) -> list[str]:
        return [m.text for m in self.tg.messages]


@asynccontextmanager
async def running(
    redis_url: str,
    script: ScriptedModel,
    *,
    workers: int = 2,
    telegram: dict[str, Any] | None = None,
    **extra: Any,
) -> AsyncIterator[Env]:
    async with FakeOpenAI(script) as fake_model, FakeTelegram() as tg:
        tg_values = {
            "bot_token": tg.token,
            "api_url": tg.api_url,
            "file_url": tg.file_url,
            "poll_timeout_seconds": 1,
            **(telegram or {}),
        }
        values = stack_values(redis_url, fake_model.base_url, telegram=tg_values, **extra)
        adapter = build(Settings(**values))
        async with Stack(values=values, adapters=[adapter], workers=workers) as stack:
            yield Env(tg=tg, model=fake_model, stack=stack, values=values)


def announces(messages: list[SentMessage]) -> list[SentMessage]:
    return [m for m in messages if re.search(r"Subagent #\d+ .* finished", m.text)]


def statuses(messages: list[SentMessage]) -> list[SentMessage]:
    """Status messages: sent as ``⏳ …``, then edited (finally ``✅ … — success``)."""
    return [m for m in messages if m.edits or m.text.startswith("⏳")]


def finished_statuses(messages: list[SentMessage]) -> list[SentMessage]:
    return [m for m in statuses(messages) if m.text.startswith("✅") and "— success" in m.text]


async def test_two_topics_and_general_interleaved_keep_to_their_topic(redis_url: str) -> None:
    topics = {"alpha": 11, "beta": 22, "gamma": None}  # gamma talks in the General topic
    async with running(redis_url, model(), workers=3) as env:
        tg = env.tg
        for topic, thread_id in topics.items():
            count = 1 if thread_id is None else 2
            tg.push(
                tg.message(chat=FORUM, text=f"{BOT} spawn {topic} {count}", thread_id=thread_id)
            )
        await env.stack.wait_for(
            lambda: {f"Started {t}." for t in topics} <= set(env.texts()), timeout=30
        )
        for topic in ("beta", "alpha"):  # follow-ups while the runs are going
            tg.push(
                tg.message(chat=FORUM, text=f"{BOT} and {topic} more?", thread_id=topics[topic])
            )
        await env.stack.wait_for(
            lambda: (
                len(announces(tg.messages)) == 5
                and len(finished_statuses(tg.messages)) == 5
                and sum(t.startswith("echo: ") for t in env.texts()) == 2
            ),
            timeout=60,
        )
        await env.stack.wait_for(env.drained)
    for message in tg.messages:
        [topic] = [t for t in topics if t in message.text]
        assert message.message_thread_id == topics[topic], (message.text, topic)
        assert message.chat_id == FORUM["id"]
    for topic, thread_id in topics.items():
        mine = [m for m in tg.messages if m.message_thread_id == thread_id]
        runs = 1 if thread_id is None else 2
        follow_up = 0 if thread_id is None else 1
        assert len(announces(mine)) == len(finished_statuses(mine)) == runs
        assert len(mine) == 1 + follow_up + 2 * runs
        results = re.findall(
            rf"Result: result of {topic} task (\d)", " ".join(m.text for m in mine)
        )
        assert sorted(results) == [str(i) for i in range(runs)]
    # The General topic is addressed without a thread id (Telegram rejects id 1).
    general = [c for c in env.tg.calls_to("sendMessage") if "gamma" in c.params["text"]]
    assert general and all("message_thread_id" not in c.params for c in general)
    typing = {c.params.get("message_thread_id") for c in env.tg.calls_to("sendChatAction")}
    assert typing == {11, 22, None}
    edited = {c.params["message_id"] for c in env.tg.calls_to("editMessageText")}
    assert edited == {m.message_id for m in statuses(tg.messages)}


async def test_group_answers_only_when_addressed(redis_url: str) -> None:
    async with running(redis_url, model()) as env:
        tg = env.tg
        tg.push(tg.message(chat=GROUP, text=f"hey {BOT} what now"))
        await env.stack.wait_for(lambda: env.texts() == ["echo: hey what now"], timeout=30)
        mine = tg.as_message(tg.messages[0])
        tg.push(tg.message(chat=GROUP, text="just chatting"))
        tg.push(tg.message(chat=GROUP, text="agreed", reply_to=mine))
        tg.push(tg.message(chat=GROUP, text="/subagents@fanbot_bot list"))
        tg.push(tg.message(chat=GROUP, text="/subagents@other_bot list"))
        tg.push(tg.message(chat=GROUP, text="last words"))
        # Updates are handled in order, so once this one is answered the rest were seen.
        tg.push(tg.message(chat=GROUP, text=f"{BOT} final"))
        await env.stack.wait_for(lambda: len(env.texts()) == 4, timeout=30)
        await env.stack.wait_for(env.turns_idle)
        await env.stack.wait_for(env.drained)
    assert [spoken(r) for r in env.main_requests()] == ["hey what now", "agreed", "final"]
    assert env.turn_jobs() == 3
    [command_answer] = [t for t in env.texts() if not t.startswith("echo: ")]
    assert "subagent" in command_answer.lower()  # the command router answered it
    assert sorted(env.texts()) == sorted(
        ["echo: hey what now", "echo: agreed", "echo: final", command_answer]
    )
    assert {m.message_thread_id for m in tg.messages} == {None}


async def test_webhook_checks_the_secret_and_handles_an_update_once(redis_url: str) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}/tg/hook"
    async with running(
        redis_url,
        model(),
        telegram={"webhook_url": url, "webhook_secret": "s3cret-token_42"},
        gateway={"http_host": LOOPBACK, "http_port": port},
    ) as env:
        tg = env.tg
        forged = {"update_id": 1, **tg.message(chat=FORUM, text=f"{BOT} forged", thread_id=11)}
        async with ClientSession() as http:
            for headers in ({SECRET_HEADER: "wrong"}, {}):
                async with http.post(url, json=forged, headers=headers) as resp:
                    assert resp.status == 403
        update = tg.push(tg.message(chat=FORUM, text=f"{BOT} via webhook", thread_id=11))
        await env.stack.wait_for(lambda: env.texts() == ["echo: via webhook"], timeout=30)
        # Telegram delivering the same update again is answered 200 and deduplicated.
        async with (
            ClientSession() as http,
            http.post(url, json=update, headers={SECRET_HEADER: "s3cret-token_42"}) as resp,
        ):
            assert resp.status == 200
        await env.stack.wait_for(env.turns_idle)
        await env.stack.wait_for(env.drained)
    assert tg.webhook_deliveries == [(update["update_id"], 200)]
    assert [(m.text, m.message_thread_id) for m in tg.messages] == [("echo: via webhook", 11)]
    assert [spoken(r) for r in env.main_requests()] == ["via webhook"]
    assert env.turn_jobs() == 1
    assert tg.calls_to("getUpdates") == []


async def test_flood_control_is_waited_out_and_the_reply_sent_once(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.gateway.egress")
    async with running(redis_url, model()) as env:
        tg = env.tg
        tg.inject("sendMessage", status=429, retry_after=2)
        tg.push(tg.message(chat=FORUM, text=f"{BOT} hello", thread_id=11))
        await env.stack.wait_for(lambda: len(tg.messages) == 1, timeout=30)
        await env.stack.wait_for(env.drained)
    assert [(m.text, m.message_thread_id) for m in tg.messages] == [("echo: hello", 11)]
    assert len(tg.calls_to("sendMessage")) == 2  # the rejected one, then the delivery
    retries = [r.getMessage() for r in caplog.records if r.name == "bot.gateway.egress"]
    assert any(re.search(r"retry 1 in 2\.0s", m) for m in retries), retries


PROSE = "😀🎉 👩‍💻 naïve café — a < b & c > d <i>raw</i>"
CODE = "'ü😀' if a < b and c & d else None"


def big_reply(target: int = 20_000) -> str:
    """Prose (``pNNN-LLL`` lines) and code blocks (``cNNN-LLL`` lines), emoji everywhere;
    block 5 is longer than a message, so a cut inside a code block is exercised too."""
    pieces: list[str] = []
    block = 0
    while sum(map(len, pieces)) < target:
        prose = [f"p{block:03d}-{i:03d} {PROSE}" for i in range(6)]
        code = [f"c{block:03d}-{i:03d} = {CODE}" for i in range(120 if block == 5 else 12)]
        pieces.append("\n".join(prose) + "\n\n```python\n" + "\n".join(code) + "\n```\n\n")
        block += 1
    return "".join(pieces).strip()


@pytest.mark.parametrize("limited", [False, True], ids=["", "429-midway"])
async def test_twenty_thousand_character_reply_is_split_and_every_part_accepted(
    redis_url: str, limited: bool
) -> None:
    reply = big_reply()
    assert len(reply) >= 20_000
    expected = re.findall(MARK, reply)
    script = ScriptedModel().on("big reply please", Text(reply)).on(lambda _r: True, main_agent)
    uncut = {"max_outbound_chars": 40_000}  # the default (20,000) would cut this reply
    async with running(redis_url, script, gateway=uncut) as env:
        tg = env.tg
        if limited:  # flood control on part 4: the retry must resume there, not repost 1-3
            tg.inject("sendMessage", status=429, retry_after=2, after=3)
        tg.push(tg.message(chat=FORUM, text=f"{BOT} big reply please", thread_id=11))
        await env.stack.wait_for(lambda: expected[-1] in "".join(env.texts()), timeout=30)
        await env.stack.wait_for(env.drained)
    parts = tg.messages
    assert len(parts) >= 5  # 20k characters, emoji count twice in UTF-16
    # Every part accepted as sent (none rejected as too long or unparseable).
    assert len(tg.calls_to("sendMessage")) == len(parts) + limited
    assert all(p.parse_mode == "HTML" and p.message_thread_id == 11 for p in parts)
    assert all(utf16_len(p.text) <= 4096 for p in parts)
    assert re.findall(MARK, "\n".join(p.text for p in parts)) == expected
    for part in parts:  # code stays in <pre> blocks that open and close in the same part
        pre = "".join(re.findall(r"<pre>.*?</pre>", part.raw_text, re.S))
        assert part.raw_text.count("<pre>") == part.raw_text.count("</pre>")
        assert re.findall(r"c\d{3}-\d{3}", pre) == re.findall(r"c\d{3}-\d{3}", part.raw_text)
        assert not re.findall(r"p\d{3}-\d{3}", pre)
        for line in part.text.splitlines():  # what readers see: the model's text, verbatim
            if re.match(r"p\d{3}-\d{3} ", line):
                assert line.endswith(PROSE), line
            elif re.match(r"c\d{3}-\d{3} ", line):
                assert line.endswith(CODE), line
