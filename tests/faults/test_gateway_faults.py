"""The gateway dies (SIGKILL at an exact instruction) or runs twice: nothing lost, nothing twice.

``fanbot gateway`` runs as a real child process with the Telegram (or Slack) adapter against
the fake; :mod:`bot.failpoints` makes it SIGKILL itself at a chosen point of delivery, so the
test knows exactly which entry was in flight instead of racing a signal.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.keys import Keys
from bot.store.outbox import OutboxWriter
from bot.store.runs import RunsRegistry
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import GatewayProcess, Stack, WorkerPool, hermetic_env
from bot.types import Outbound, OutboundKind, ThreadRef
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

FORUM = forum()
TOPICS = (11, 12, 13)
SLACK_CHANNEL, SLACK_THREAD = "C0GENERAL", "700.1"


@dataclass
class Env:
    tg: FakeTelegram
    values: dict[str, Any]
    client: redis.Redis
    log_dir: Path

    def gateway(self, failpoints: str = "", name: str = "gateway") -> GatewayProcess:
        env = hermetic_env(self.values)
        return GatewayProcess(env=env, log_path=self.log_dir / f"{name}.log", failpoints=failpoints)

    def put(self, topic: int, text: str) -> str:
        thread = ThreadRef(
            platform="telegram", account=str(self.tg.bot_id), chat=str(FORUM["id"]),
            thread=str(topic),
        )  # fmt: skip
        message = Outbound(
            thread=thread, text=text, kind=OutboundKind.ANNOUNCE, idempotency_key=f"t:{text}"
        )
        return OutboxWriter(redis=self.client, keys=Keys()).put(message)

    def posted(self, topic: int | None = None) -> list[str]:
        return [m.text for m in self.tg.messages if topic is None or m.message_thread_id == topic]

    def drained(self) -> bool:
        groups = self.client.xinfo_groups(Keys().outbox)
        return bool(groups) and all(g["pending"] == 0 for g in groups)


class SlowTelegram(FakeTelegram):
    """Takes ``latency`` seconds to accept each message."""

    latency = 0.4

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        await asyncio.sleep(self.latency)
        return await super()._api_sendMessage(params)


@asynccontextmanager
async def telegram_env(
    redis_url: str, tmp_path: Path, fake: type[FakeTelegram] = FakeTelegram, **gateway: Any
) -> AsyncIterator[Env]:
    async with fake() as tg:
        for topic in TOPICS:
            tg.add_topic(FORUM, topic)
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "telegram": {
                "bot_token": tg.token, "api_url": tg.api_url, "file_url": tg.file_url,
                "poll_timeout_seconds": 1,
            },
            "gateway": {
                "reclaim_idle_seconds": 2, "delivery_backoff_seconds": 0.1, "alive_ttl_seconds": 2,
                "progress_edit_seconds": 0.2, **gateway,
            },
        }  # fmt: skip
        client = redis.Redis.from_url(redis_url)
        try:
            yield Env(tg=tg, values=values, client=client, log_dir=tmp_path)
        finally:
            client.close()


async def exited(gateway: GatewayProcess, timeout: float = 30.0) -> int:
    await Stack.wait_for(lambda: gateway.returncode() is not None, timeout=timeout)
    code = gateway.returncode()
    assert code is not None
    return code


@pytest.mark.parametrize("point", ["egress.before_send", "egress.after_send", "egress.before_ack"])
async def test_sigkill_between_read_and_ack_then_restart_delivers_in_order(
    redis_url: str, tmp_path: Path, point: str
) -> None:
    async with telegram_env(redis_url, tmp_path) as env:
        texts = [f"announce {i}" for i in range(1, 7)]
        for text in texts:
            env.put(TOPICS[0], text)

        first = env.gateway(failpoints=f"{point}=kill@3", name="first").start()
        assert await exited(first) == -9, first.log()
        sent_before_crash = env.posted()
        expected_before = 2 if point == "egress.before_send" else 3
        assert sent_before_crash == texts[:expected_before]

        with env.gateway(name="second") as second:
            await Stack.wait_for(lambda: len(env.posted()) >= len(texts), timeout=30)
            await Stack.wait_for(env.drained, timeout=10)
            await asyncio.sleep(0.5)  # a repeat, if any, would arrive now
            log = second.log()
        posted = env.posted(TOPICS[0])
        if point == "egress.after_send":
            # Killed after Telegram took the message, before Redis recorded it: the Bot API
            # lets a bot read nothing back, so that one message is posted again (at least
            # once), still in order; every other entry once. Slack: see the next test.
            assert posted == [*texts[:3], texts[2], *texts[3:]]
        else:
            # Before the send, or after it was recorded (before the delivered marker and
            # the ack): exactly once each, in order.
            assert posted == texts
        assert "took over" in log
        assert env.tg.token not in log + first.log()  # never a secret in a log


@dataclass
class SlackEnv:
    slack: FakeSlack
    values: dict[str, Any]
    client: redis.Redis
    log_dir: Path

    def gateway(self, failpoints: str = "", name: str = "gateway") -> GatewayProcess:
        env = hermetic_env(self.values)
        return GatewayProcess(env=env, log_path=self.log_dir / f"{name}.log", failpoints=failpoints)

    def put(self, text: str, *, thread_ts: str | None = SLACK_THREAD) -> str:
        where = ThreadRef(
            platform="slack", account=self.slack.team_id, chat=SLACK_CHANNEL, thread=thread_ts
        )
        message = Outbound(
            thread=where, text=text, kind=OutboundKind.ANNOUNCE, idempotency_key=f"s:{text[:40]}"
        )
        return OutboxWriter(redis=self.client, keys=Keys()).put(message)

    def posted(self, thread_ts: str | None = SLACK_THREAD) -> list[str]:
        return [m.text for m in self.slack.thread(SLACK_CHANNEL, thread_ts)]

    def drained(self) -> bool:
        groups = self.client.xinfo_groups(Keys().outbox)
        return bool(groups) and all(g["pending"] == 0 for g in groups)


@asynccontextmanager
async def slack_env(redis_url: str, tmp_path: Path, **gateway: Any) -> AsyncIterator[SlackEnv]:
    async with FakeSlack() as slack:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "slack": {
                "bot_token": slack.bot_token, "app_token": slack.app_token,
                "api_url": slack.api_url, "socket_ping_interval": 1,
            },
            "gateway": {
                "reclaim_idle_seconds": 2, "delivery_backoff_seconds": 0.1, "alive_ttl_seconds": 2,
                **gateway,
            },
        }  # fmt: skip
        client = redis.Redis.from_url(redis_url)
        try:
            yield SlackEnv(slack=slack, values=values, client=client, log_dir=tmp_path)
        finally:
            client.close()


async def test_slack_sigkill_after_the_platform_took_a_message_is_still_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    """The Telegram case above that posts a message twice, on Slack: the new gateway finds
    the message by its metadata (``conversations.replies``) and records it instead."""
    async with slack_env(redis_url, tmp_path) as env:
        texts = [f"announce {i}" for i in range(1, 7)]
        for text in texts:
            env.put(text)

        first = env.gateway(failpoints="egress.after_send=kill@3", name="first").start()
        assert await exited(first) == -9, first.log()
        assert env.posted() == texts[:3]  # the third reached Slack; Redis never heard of it

        with env.gateway(name="second") as second:
            await Stack.wait_for(lambda: len(env.posted()) >= len(texts), timeout=30)
            await Stack.wait_for(env.drained, timeout=10)
            await asyncio.sleep(0.5)  # negative check: a repeat, if any, would arrive now
            log = second.log()
        assert env.posted() == texts  # exactly once each, in order
        assert env.slack.calls_to("conversations.replies")  # it looked before re-posting
        assert "took over" in log
        assert env.slack.bot_token not in log + first.log()


async def test_an_entry_delivered_but_not_acked_is_not_posted_again(
    redis_url: str, tmp_path: Path
) -> None:
    """The delivered-key record turns a redelivery into an acknowledgement."""
    async with telegram_env(redis_url, tmp_path) as env:
        entry = env.put(TOPICS[0], "already delivered")
        keys = Keys()
        env.client.xgroup_create(keys.outbox, "gateway", id="0", mkstream=True)
        # A gateway that died after recording delivery but before XACK left exactly this:
        env.client.xreadgroup("gateway", "dead-gw", {keys.outbox: ">"}, count=10)
        env.client.set(keys.delivered("t:already delivered"), '["1"]')
        env.put(TOPICS[0], "next one")

        with env.gateway():
            await Stack.wait_for(lambda: env.posted() == ["next one"], timeout=30)
            await Stack.wait_for(env.drained, timeout=10)
        assert env.posted() == ["next one"]
        assert env.client.xpending(keys.outbox, "gateway")["pending"] == 0
        assert entry  # acknowledged without a post


async def test_graceful_restart_hands_over_at_once_and_keeps_order(
    redis_url: str, tmp_path: Path
) -> None:
    async with telegram_env(redis_url, tmp_path) as env:
        env.tg.inject("sendMessage", status=429, retry_after=30)  # the first gateway waits
        texts = [f"m{i}" for i in range(5)]
        for text in texts:
            env.put(TOPICS[1], text)
        first = env.gateway(name="first").start()
        await Stack.wait_for(lambda: len(env.tg.calls_to("sendMessage")) >= 1, timeout=30)
        assert first.stop() == 0  # gracefully, while it waits out the 429
        more = [f"m{i}" for i in range(5, 8)]
        for text in more:
            env.put(TOPICS[1], text)
        with env.gateway(name="second"):
            await Stack.wait_for(lambda: len(env.posted()) >= 8, timeout=20)
            await Stack.wait_for(env.drained, timeout=10)
        assert env.posted(TOPICS[1]) == texts + more


async def test_two_gateways_at_once_never_post_twice(redis_url: str, tmp_path: Path) -> None:
    # An aggressive reclaim makes the two gateways fight over every slow entry.
    async with telegram_env(redis_url, tmp_path, SlowTelegram, reclaim_idle_seconds=0.3) as env:
        with env.gateway(name="a"), env.gateway(name="b"):
            alive = Keys().gateway_alive("*")
            await Stack.wait_for(lambda: len(env.client.keys(alive)) == 2, timeout=30)
            texts = []
            for i in range(60):
                topic = TOPICS[i % len(TOPICS)]
                texts.append(f"topic {topic} #{i}")
                env.put(topic, texts[-1])
                # Paced on purpose (the scenario, not a wait): entries keep arriving
                # while both gateways read, so they fight over every slow one.
                await asyncio.sleep(0.05)
            await Stack.wait_for(lambda: len(env.posted()) >= len(texts), timeout=60)
            await Stack.wait_for(env.drained, timeout=20)
            await asyncio.sleep(1.0)  # a double post, if any, would land now
        counts = Counter(env.posted())
        assert sorted(counts) == sorted(texts)
        assert max(counts.values()) == 1
        consumers = {c["name"] for c in env.client.xinfo_consumers(Keys().outbox, "gateway")}
        assert len(consumers) == 2  # both gateways really took part


_ANNOUNCE = re.compile(r'Subagent #\d+ "(\w+-\d+)"[^\n]* finished')


def announce_labels(texts: list[str]) -> list[str]:
    return [m[1] for t in texts if (m := _ANNOUNCE.search(t))]


async def test_gateway_down_while_runs_finish_delivers_all_in_order_per_thread(
    redis_url: str, tmp_path: Path
) -> None:
    async with telegram_env(redis_url, tmp_path) as env, FakeOpenAI(tg_model()) as fake:
        extra = {k: v for k, v in env.values.items() if k != "redis_url"}
        env.values = stack_values(redis_url, fake.base_url, **extra)
        workers = WorkerPool(env=hermetic_env(env.values), count=2, log_path=tmp_path / "w.log")
        workers.start()
        try:
            with env.gateway(name="first") as first:
                for topic, word in ((TOPICS[0], "red"), (TOPICS[1], "blue")):
                    env.tg.push(env.tg.message(chat=FORUM, text=f"@fanbot_bot spawn {word} 3",
                                               thread_id=topic))  # fmt: skip
                await Stack.wait_for(
                    lambda: sum(t.startswith("Started") for t in env.posted()) == 2, timeout=30
                )
                first.kill()  # SIGKILL while six runs are still going
            assert not announce_labels(env.posted())
            await Stack.wait_for(lambda: finished_runs(env.client) == 6, timeout=60)
            with env.gateway(name="second"):
                await Stack.wait_for(lambda: len(announce_labels(env.posted())) >= 6, timeout=30)
                await Stack.wait_for(env.drained, timeout=10)
                await asyncio.sleep(0.5)  # negative check: a repeat, if any, would arrive now
        finally:
            workers.stop()
        for topic in TOPICS[:2]:
            posted = announce_labels(env.posted(topic))
            assert posted == announce_labels(outbox_texts(env.client, topic))
            assert len(posted) == len(set(posted)) == 3


def tg_model() -> ScriptedModel:
    def main(request: ChatRequest) -> Reply:
        word, count = re.findall(r"spawn (\w+) (\d)", request.last_user_message)[0]
        if request.last_role == "tool":
            return Text(f"Started {word}.")
        return ToolCalls(
            [Call("sessions_spawn", {"task": f"{word} {i}", "label": f"{word}-{i}"})
             for i in range(int(count))]
        )  # fmt: skip

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, lambda r: Text("done", delay=random.uniform(1.5, 3.0)))
    )


def finished_runs(client: redis.Redis) -> int:
    return sum(r.status.terminal for r in RunsRegistry(redis=client, keys=Keys()).all())


def outbox_texts(client: redis.Redis, topic: int) -> list[str]:
    texts = []
    for _id, fields in client.xrange(Keys().outbox):
        data = json.loads(fields[b"data"])
        if data["thread"]["thread"] == str(topic):
            texts.append(data["text"])
    return texts
