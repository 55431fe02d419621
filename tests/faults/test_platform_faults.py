"""Platform faults: the real gateway, a forked worker, the real Slack/Telegram adapters
against the protocol fakes, failing for a while.

Announces are written by the worker into the outbox; the fakes fail the platform's send
method (5xx, 429 with Retry-After, connection refused while the server is down) and the
outbox must retry with backoff, then deliver every entry exactly once, in order per
thread. Past the delivery budget an entry lands in the dead-letter stream, an ERROR log
line names it and ``fanbot doctor`` reports it. No log line carries a bot token.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from adapters.slack import build as build_slack
from adapters.telegram import build as build_telegram
from bot.cli.doctor import Check, check_dead_letters
from bot.config import Settings
from bot.keys import Keys
from bot.store.dead_letters import DeadLetters
from bot.store.runs import RunsRegistry
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent
from bot.testing.stack import Stack, hermetic_env
from bot.types import Outbound
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

FORUM = forum()
TOPICS = {"alpha": 11, "beta": 22}
SLACK_CHANNEL = "C0GENERAL"
_SPAWN = re.compile(r"spawn (\w+) (\d)")
# Status lines ("⏳ [general-purpose] Subagent #1 "alpha-0" — step 1 …", finally
# "✅ … — success (1 tool, 0.4s)") are best effort and bypass the outbox; announces carry
# the template's "Status:" line.
_SUBAGENT = re.compile(r"^\S+ (?:\[[^\]]+\] )?Subagent #\d+ ")
OUTAGE = 2.0  # seconds the platform is down in the connection-refused test
FAST_DELIVERY = {"delivery_backoff_seconds": 0.1, "delivery_backoff_max_seconds": 1.0}


def is_announce(text: str) -> bool:
    return "Subagent #" in text and "Status:" in text


def is_status(first_text: str) -> bool:
    return bool(_SUBAGENT.match(first_text)) and not is_announce(first_text)


def main_agent(request: ChatRequest) -> Reply:
    """``spawn <topic> <n>`` fans out n subagents, then says ``Started <topic>.``."""
    found = _SPAWN.search(request.last_user_message)
    if found is None:
        return Text("say: spawn <topic> <n>")
    topic, count = found[1], int(found[2])
    if request.last_role == "tool":
        return Text(f"Started {topic}.")
    return ToolCalls(
        [
            Call("sessions_spawn", {"task": f"{topic} task {i}", "label": f"{topic}-{i}"})
            for i in range(count)
        ]
    )


def model(gate: asyncio.Event) -> ScriptedModel:
    """Subagents answer ``result of <task>`` once ``gate`` is open (the test decides when)."""

    async def subagent(request: ChatRequest) -> Reply:
        await gate.wait()
        return Text(f"result of {request.last_user_message}")

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main_agent)
        .on(_is_subagent, subagent)
    )


@dataclass(frozen=True, kw_only=True)
class SendCall:
    """One call of the platform's send method as the fake saw it."""

    at: float
    status: int
    text: str


@dataclass
class Side:
    """One platform's fake behind one interface: say, fail, observe, go down."""

    name: str
    fake: Any
    token: str
    say: Callable[[str, str], Any]
    fail: Callable[..., None]
    sends: Callable[[], list[SendCall]]
    posted: Callable[[], dict[tuple[str, str | None], list[tuple[str, str]]]]
    """Non-status messages per ``(chat, thread)``: ``(message id, text)`` in posting order."""


def telegram_side(tg: FakeTelegram) -> Side:
    async def say(topic: str, text: str) -> None:
        tg.push(tg.message(chat=FORUM, text=f"@fanbot_bot {text}", thread_id=TOPICS[topic]))

    def fail(status: int, *, times: int, retry_after: int | None = None, when: Any = None) -> None:
        tg.inject("sendMessage", status=status, times=times, retry_after=retry_after, when=when)

    def sends() -> list[SendCall]:
        return [
            SendCall(at=c.at, status=c.status, text=str(c.params.get("text", "")))
            for c in tg.calls_to("sendMessage")
        ]

    def posted() -> dict[tuple[str, str | None], list[tuple[str, str]]]:
        out: dict[tuple[str, str | None], list[tuple[str, str]]] = {}
        for m in tg.messages:
            if not is_status((m.edits or [m.text])[0]):
                thread = None if m.message_thread_id is None else str(m.message_thread_id)
                out.setdefault((str(m.chat_id), thread), []).append((str(m.message_id), m.text))
        return out

    return Side("telegram", tg, tg.token, say, fail, sends, posted)


def slack_side(slack: FakeSlack) -> Side:
    roots: dict[str, str] = {}

    async def say(topic: str, text: str) -> None:
        mention = slack.app_mention(text=f"<@U0FANBOT> {text}", channel=SLACK_CHANNEL)
        roots[topic] = mention["ts"]
        await slack.wait_ack(await slack.push_event(mention))

    def fail(status: int, *, times: int, retry_after: int | None = None, when: Any = None) -> None:
        slack.fail(
            "chat.postMessage", status=status, times=times, retry_after=retry_after, when=when
        )

    def sends() -> list[SendCall]:
        return [
            SendCall(at=c.at, status=c.status, text=str(c.args.get("text", "")))
            for c in slack.calls_to("chat.postMessage")
        ]

    def posted() -> dict[tuple[str, str | None], list[tuple[str, str]]]:
        out: dict[tuple[str, str | None], list[tuple[str, str]]] = {}
        for m in slack.messages:
            if not is_status((m.edits or [m.text])[0]):
                out.setdefault((m.channel, m.thread_ts), []).append((m.ts, m.text))
        return out

    return Side("slack", slack, slack.bot_token, say, fail, sends, posted)


@dataclass
class Env:
    side: Side
    stack: Stack
    values: dict[str, Any]
    model: FakeOpenAI
    caplog: pytest.LogCaptureFixture
    gate: asyncio.Event
    keys: Keys = field(default_factory=Keys)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.values["redis_url"], decode_responses=True)

    def outbox(self) -> list[tuple[str, Outbound]]:
        """Outbox entries in stream order; a replayed message counts at its last entry."""
        with self.client() as client:
            entries: Any = client.xrange(self.keys.outbox)
        latest: dict[str, tuple[str, Outbound]] = {}
        for entry_id, fields in entries:
            message = Outbound.from_json(json.loads(fields["data"]))
            latest.pop(message.idempotency_key, None)
            latest[message.idempotency_key] = (entry_id, message)
        return list(latest.values())

    def dead_letters(self) -> list[tuple[str, dict[str, str]]]:
        with self.client() as client:
            entries: Any = client.xrange(self.keys.dead_letter)
        return list(entries)

    def runs_terminal(self, count: int) -> bool:
        with self.client() as client:
            records = RunsRegistry(redis=client, keys=self.keys).all()
        return len(records) == count and all(r.status.terminal for r in records)

    def announces_written(self) -> list[Outbound]:
        return [m for _, m in self.outbox() if is_announce(m.text)]

    def delivered_in_stream_order(self) -> dict[tuple[str, str | None], list[str]]:
        """Per thread: the platform ids the gateway recorded, entry by entry, stream order."""
        out: dict[tuple[str, str | None], list[str]] = {}
        with self.client() as client:
            for _, message in self.outbox():
                raw = client.get(self.keys.delivered(message.idempotency_key))
                ids = json.loads(raw) if raw else ["<missing>"]
                out.setdefault((message.thread.chat, message.thread.thread), []).extend(ids)
        return out

    async def drained(self) -> bool:
        gateway = self.stack.gateway
        assert gateway is not None
        return await gateway.egress.drained()

    def retry_lines(self) -> list[str]:
        return [
            r.getMessage()
            for r in self.caplog.records
            if r.name == "bot.gateway.egress" and r.getMessage().startswith("send of announce:")
        ]

    def assert_exactly_once_in_order(self, announces: int) -> None:
        """Every outbox entry delivered once, in stream order per thread, nothing else."""
        outbox = self.outbox()
        assert sum(is_announce(m.text) for _, m in outbox) == announces
        delivered = self.delivered_in_stream_order()
        posted = self.side.posted()
        assert {t: [i for i, _ in msgs] for t, msgs in posted.items()} == delivered
        texts = [text for msgs in posted.values() for _, text in msgs]
        assert sum(is_announce(t) for t in texts) == announces
        assert len(set(texts)) == len(texts)

    def assert_no_secret_logged(self) -> None:
        leaked = [r.getMessage() for r in self.caplog.records if self.side.token in _full(r)]
        assert leaked == []


def _full(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += logging.Formatter().formatException(record.exc_info)
    return text


@asynccontextmanager
async def running(
    platform: str,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    *,
    gateway: dict[str, Any] | None = None,
    gated: bool = False,
) -> AsyncIterator[Env]:
    caplog.set_level(logging.DEBUG)
    gate = asyncio.Event()
    if not gated:
        gate.set()
    async with (
        FakeOpenAI(model(gate)) as fake_model,
        _platform(platform) as (
            side,
            platform_values,
        ),
    ):
        values = stack_values(
            redis_url,
            fake_model.base_url,
            gateway={**FAST_DELIVERY, **(gateway or {})},
            **{platform: platform_values},
        )
        settings = Settings(**values)
        adapter = build_telegram(settings) if platform == "telegram" else build_slack(settings)
        async with Stack(values=values, adapters=[adapter], workers=1) as stack:
            if platform == "slack":
                await side.fake.wait_connected()
            yield Env(
                side=side, stack=stack, values=values, model=fake_model, caplog=caplog, gate=gate
            )


@asynccontextmanager
async def _platform(platform: str) -> AsyncIterator[tuple[Side, dict[str, Any]]]:
    if platform == "telegram":
        async with FakeTelegram() as tg:
            tg.add_chat(FORUM)
            values: dict[str, Any] = {"bot_token": tg.token, "api_url": tg.api_url}
            values |= {"file_url": tg.file_url, "poll_timeout_seconds": 1}
            yield telegram_side(tg), values
    else:
        async with FakeSlack() as slack:
            values = {
                "bot_token": slack.bot_token,
                "app_token": slack.app_token,
                "api_url": slack.api_url,
                "socket_ping_interval": 1.0,
            }
            yield slack_side(slack), values


async def spawn_in_two_threads(env: Env, per_thread: int = 2) -> None:
    for topic in TOPICS:
        await env.side.say(topic, f"spawn {topic} {per_thread}")


def announce_of(topic: str) -> Callable[[dict[str, Any]], bool]:
    """Fault filter: sends of an announce of one thread's runs (``<topic> task <n>``)."""
    return lambda params: is_announce(text := str(params.get("text", ""))) and topic in text


@pytest.mark.parametrize("platform", ["telegram", "slack"])
async def test_5xx_and_429_for_a_while_then_every_announce_lands_once_in_order(
    platform: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    failures, retry_after = 3, 2
    # Slack's client waits out one short 429 itself; the second one reaches the outbox.
    rate_limited = 2 if platform == "slack" else 1
    async with running(platform, redis_url, caplog) as env:
        env.side.fail(500, times=failures, when=announce_of("alpha"))
        env.side.fail(429, times=rate_limited, retry_after=retry_after, when=announce_of("beta"))
        await spawn_in_two_threads(env)
        await env.stack.wait_for(lambda: env.runs_terminal(4), timeout=30)
        await env.stack.wait_for(env.drained, timeout=20)

        env.assert_exactly_once_in_order(announces=4)
        sends = env.side.sends()
        failed = sorted(c.status for c in sends if c.status != 200)
        assert failed == [429] * rate_limited + [500] * failures
        assert all(announce_of("alpha")({"text": c.text}) for c in sends if c.status == 500)
        retries = env.retry_lines()
        # (a word of its own: an entry id may hold "500" too)
        server_errors = [x for x in retries if re.search(r"\b500\b|Internal Server Error", x)]
        # Exponential backoff of the first alpha announce: 0.1, 0.2, 0.4 s.
        waits = re.findall(r"retry \d+ in ([\d.]+)s", " ".join(server_errors))
        assert waits == ["0.1", "0.2", "0.4"], retries

        [limited] = [line for line in retries if line not in server_errors]
        assert f"retry 1 in {retry_after:.1f}s" in limited
        beta = [c for c in sends if announce_of("beta")({"text": c.text})]
        first_beta = [c for c in beta if c.text == beta[0].text]
        assert [c.status for c in first_beta] == [429] * rate_limited + [200]
        waited = [b.at - a.at for a, b in itertools.pairwise(first_beta)]
        assert all(w >= retry_after for w in waited), waited  # never earlier than Retry-After
        env.assert_no_secret_logged()
        print(
            f"{platform}: {failures} x 500 -> {server_errors}; "
            f"429 Retry-After {retry_after}s -> waited {[round(w, 2) for w in waited]}s"
        )


@pytest.mark.parametrize("platform", ["telegram", "slack"])
async def test_platform_down_announces_written_meanwhile_land_once_after_it_returns(
    platform: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(
        platform, redis_url, caplog, gateway={"delivery_attempts": 30}, gated=True
    ) as env:
        await spawn_in_two_threads(env)
        started = {f"Started {topic}." for topic in TOPICS}
        await env.stack.wait_for(
            lambda: started <= {t for msgs in env.side.posted().values() for _, t in msgs},
            timeout=30,
        )
        assert env.announces_written() == []
        await env.side.fake.pause()
        down_at = asyncio.get_running_loop().time()
        env.gate.set()  # the subagents answer now, while the platform is down
        # Down until the worker wrote every announce and the gateway failed to send some.
        await env.stack.wait_for(lambda: env.runs_terminal(4), timeout=30)
        await env.stack.wait_for(lambda: len(env.retry_lines()) >= 2, timeout=20)
        written_while_down = len(env.announces_written())
        # The scenario: an outage of at least OUTAGE seconds (not a synchronisation wait).
        await asyncio.sleep(max(0.0, OUTAGE - (asyncio.get_running_loop().time() - down_at)))
        await env.side.fake.resume()
        down_for = asyncio.get_running_loop().time() - down_at
        await env.stack.wait_for(env.drained, timeout=30)
        assert written_while_down == 4
        # Ingress is back too (Telegram polls again, Slack's socket reconnected).
        await env.side.say("alpha", "are you back?")
        await env.stack.wait_for(
            lambda: any(t.startswith("say:") for m in env.side.posted().values() for _, t in m),
            timeout=30,
        )
        await env.stack.wait_for(env.drained, timeout=20)
        env.assert_exactly_once_in_order(announces=4)
        retries = env.retry_lines()
        expected = "ConnectError" if platform == "telegram" else "ClientConnectorError"
        assert any(expected in line for line in retries), retries
        env.assert_no_secret_logged()
        print(f"{platform}: down {down_for:.1f}s, {len(retries)} retries, e.g. {retries[0]!r}")


async def test_beyond_the_budget_dead_letter_error_log_and_doctor(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    attempts = 3
    async with running(
        "telegram", redis_url, caplog, gateway={"delivery_attempts": attempts}
    ) as env:
        tg: FakeTelegram = env.side.fake
        doomed = "alpha task 0"
        tg.inject(
            "sendMessage", status=500, times=attempts, when=lambda p: doomed in str(p["text"])
        )
        await env.side.say("alpha", "spawn alpha 2")
        await env.stack.wait_for(lambda: env.runs_terminal(2), timeout=30)
        await env.stack.wait_for(env.drained, timeout=20)

        [(_, dead)] = env.dead_letters()
        message = Outbound.from_json(json.loads(dead["data"]))
        assert doomed in message.text and message.idempotency_key.startswith("announce:")
        assert dead["reason"] == (
            f"telegram: NetworkError: Internal Server Error (after {attempts} attempt(s))"
        )
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(dead["entry_id"] in e and dead["reason"] in e for e in errors), errors
        # Nothing else was held up or dropped: the other announce of the thread landed.
        texts = [t for msgs in env.side.posted().values() for _, t in msgs]
        assert sum(is_announce(t) for t in texts) == 1 and "alpha task 1" in " ".join(texts)

        code, out = await doctor(env)
        assert code == 1, out
        assert "BAD  dead letters: 1 message(s) ran out of delivery attempts" in out
        assert dead["reason"] in out and message.idempotency_key in out
        assert "fanbot doctor --replay-dead-letters" in out and "XREVRANGE" in out
        assert tg.token not in out
        print(f"doctor exit {code}:\n{out}")

        code, out = await doctor(env, "--replay-dead-letters")
        assert code == 0 and "replayed 1 dead letter(s) into the outbox" in out, out
        await env.stack.wait_for(
            lambda: sum(is_announce(t) for m in env.side.posted().values() for _, t in m) == 2,
            timeout=20,
        )
        await env.stack.wait_for(env.drained, timeout=20)
        assert env.dead_letters() == []
        env.assert_exactly_once_in_order(announces=2)
        with redis.Redis.from_url(env.values["redis_url"]) as client:
            assert check_dead_letters(DeadLetters(redis=client, keys=env.keys)) == Check(
                name="dead letters", ok=True, detail="none"
            )
        env.assert_no_secret_logged()


async def doctor(env: Env, *args: str) -> tuple[int, str]:
    """Run the real ``fanbot doctor`` CLI against the test's Redis, model and fake."""
    values = {
        "redis_url": env.values["redis_url"],
        "openai": env.values["openai"],
        "telegram": env.values["telegram"],
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "doctor", *args,
        env=hermetic_env(values), cwd=os.getcwd(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    return proc.returncode or 0, out.decode()
