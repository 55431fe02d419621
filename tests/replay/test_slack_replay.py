"""Real Slack payloads, written by others, replayed through a running gateway (issue 31).

One gateway per module, in Slack HTTP mode against the fake Slack, no workers: every case
of ``corpus/slack`` is signed and POSTed to ``/slack/events`` as Slack sends it (JSON, a
slash command's form, interactivity's ``payload`` field), then again as Slack's redelivery
(``X-Slack-Retry-Num: 1``). Outcomes are read once, after all posts: the HTTP statuses, the
turn jobs the gateway created (Redis: queued on ``turns`` or held behind their session's
earlier turn), and what it sent to the fake Slack. ``app_uninstalled`` / bot
``tokens_revoked`` cases go last (they end the work for their workspace). The same bodies
are then replayed through Socket Mode, the adapter's other path (each envelope, then its
redelivery), where every one must be acked. See docs/guides/slack.md "Replay suite".
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import redis
from rq.job import Job
from rq.serializers import JSONSerializer

from adapters.slack import build, lifecycle
from bot.config import Settings
from bot.errors import DeliveryError
from bot.redis.server import RedisServer
from bot.testing import slack_wire as wire
from bot.testing.fake_slack import FakeSlack
from bot.testing.netutil import LOOPBACK
from bot.testing.stack import Stack
from bot.types import Outbound, OutboundKind, Platform, ThreadRef
from tests.replay.corpus import Case, load

CASES = load("slack")
ENVELOPES = {"event": "events_api", "command": "slash_commands", "interactivity": "interactive"}
SOCKET = [c for c in CASES if c.kind in ENVELOPES]
"""Cases Socket Mode carries too (``url_verification``, ``app_rate_limited``: HTTP only)."""
PARALLEL = 8


@dataclass
class Replayed:
    """What the gateway did with the corpus, read once for every case."""

    statuses: dict[str, list[int]] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    refused: str = ""
    home_sent: bool = False
    socket_acks: dict[str, int] = field(default_factory=dict)
    socket_turns: list[dict[str, Any]] = field(default_factory=list)


def encoded(case: Case) -> tuple[bytes, str]:
    """The body as Slack sends this kind: JSON, form fields, or a form's ``payload``."""
    if case.kind == "command":
        return urllib.parse.urlencode(case.payload).encode(), "application/x-www-form-urlencoded"
    if case.kind == "interactivity":
        form = urllib.parse.urlencode({"payload": json.dumps(case.payload)})
        return form.encode(), "application/x-www-form-urlencoded"
    return json.dumps(case.payload).encode(), "application/json"


def gone(case: Case) -> bool:
    return lifecycle.lost_workspace(case.payload) is not None


def values(redis_url: str, slack: FakeSlack, mode: str) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "openai": {"base_url": f"http://{LOOPBACK}:9/v1", "model": "fake-model"},
        "limits": {"messages_per_minute_per_user": 0, "messages_per_minute_per_thread": 0},
        # The corpus's files live on files.slack.com: none is fetched (no network in tests);
        # a message with files still makes its turn, the files noted as skipped.
        "attachments": {"max_files": 0},
        "slack": {
            "bot_token": slack.bot_token,
            "app_token": slack.app_token,
            "signing_secret": slack.signing_secret,
            "api_url": slack.api_url,
            "socket_ping_interval": 1.0,
            "mode": mode,
        },
    }


def turn_jobs(redis_url: str) -> list[dict[str, Any]]:
    """Every turn job the gateway created: queued, or held behind its session's earlier
    turn (one turn at a time per session; no worker runs them here)."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = [k for k in client.scan_iter("rq:job:*") if k.count(b":") == 2]
        ids = [k.decode().rpartition(":")[2] for k in keys if client.hget(k, "origin") == b"turns"]
        jobs = Job.fetch_many(ids, connection=client, serializer=JSONSerializer)
        return [job.args[0] for job in jobs if job is not None]
    finally:
        client.close()


async def post(
    session: aiohttp.ClientSession, url: str, case: Case, *, secret: str, retry: int | None
) -> int:
    raw, ctype = encoded(case)
    headers = wire.sign(raw, secret=secret) | {"Content-Type": ctype}
    if retry is not None:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    async with session.post(url, data=raw, headers=headers) as resp:
        await resp.read()
        return resp.status


async def replay_http(redis_url: str, got: Replayed) -> None:
    async with FakeSlack() as slack:
        settings_values = values(redis_url, slack, "http")
        adapter = build(Settings(**settings_values))
        async with Stack(values=settings_values, adapters=[adapter], workers=0) as stack:
            assert stack.gateway is not None
            url = f"http://{LOOPBACK}:{stack.gateway.http_port}/slack/events"
            limit = asyncio.Semaphore(PARALLEL)
            timeout = aiohttp.ClientTimeout(total=20)
            async with aiohttp.ClientSession(timeout=timeout) as session:

                async def one(case: Case, retry: int | None) -> None:
                    async with limit:
                        status = await post(
                            session, url, case, secret=slack.signing_secret, retry=retry
                        )
                    got.statuses.setdefault(case.id, []).append(status)

                for phase in ([c for c in CASES if not gone(c)], [c for c in CASES if gone(c)]):
                    for retry in (None, 1):  # every body, then every body's redelivery
                        await asyncio.gather(*(one(c, retry) for c in phase))
            got.turns = turn_jobs(redis_url)
            got.sent = [c.method for c in slack.calls if c.method.startswith(("chat.", "files."))]
            got.refused, got.home_sent = await after_uninstall(adapter, slack)


async def after_uninstall(adapter: Any, slack: FakeSlack) -> tuple[str, bool]:
    """A send to a workspace the corpus uninstalled fails as permanent; the bot's own
    workspace still gets its messages."""
    uninstalled = next(lifecycle.lost_workspace(c.payload) for c in CASES if gone(c))
    assert uninstalled is not None

    def reply(team: str) -> Outbound:
        thread = ThreadRef(platform=Platform.SLACK, account=team, chat="C0GENERAL", thread="1.2")
        return Outbound(thread=thread, text="hello", kind=OutboundKind.REPLY)

    try:
        await adapter.send(reply(uninstalled.team_id))
        refused = ""
    except DeliveryError as exc:
        refused = f"permanent={exc.permanent}: {exc}"
    await adapter.send(reply(slack.team_id))
    return refused, any(m.text == "hello" for m in slack.messages)


async def replay_socket(redis_url: str, got: Replayed) -> None:
    async with FakeSlack(ack_timeout=None) as slack:
        settings_values = values(redis_url, slack, "socket")
        adapter = build(Settings(**settings_values))
        async with Stack(values=settings_values, adapters=[adapter], workers=0):
            await slack.wait_connected()
            for phase in ([c for c in SOCKET if not gone(c)], [c for c in SOCKET if gone(c)]):
                envelopes = [(c, await slack.push(envelope(c))) for c in phase]
                retries = [(c, await slack.redeliver(env)) for c, env in envelopes]
                for case, env in envelopes + retries:
                    await slack.wait_ack(env)
                    got.socket_acks[case.id] = got.socket_acks.get(case.id, 0) + 1
            got.socket_turns = turn_jobs(redis_url)


def envelope(case: Case) -> dict[str, Any]:
    return wire.envelope(ENVELOPES[case.kind], case.payload)


@pytest.fixture(scope="module")
def replayed(redis_server: RedisServer) -> Iterator[Replayed]:
    got = Replayed()
    for replay in (replay_http, replay_socket):
        client = redis.Redis.from_url(redis_server.url)
        client.flushall()
        client.close()
        asyncio.run(replay(redis_server.url, got))
    yield got


def message_key(case: Case) -> str | None:
    """The gateway's dedupe id of a case's message (``<channel>:<ts>``), if it has one."""
    event = case.payload.get("event")
    if isinstance(event, dict) and event.get("channel") and event.get("ts"):
        return f"{event['channel']}:{event['ts']}"
    return None


def check_turns(case: Case, turns: list[dict[str, Any]]) -> None:
    key = message_key(case)
    mine = [t for t in turns if key is not None and t["message_id"] == key]
    if case.outcome == "ignore":
        assert mine == [], f"{case.id}: expected no turn"
        return
    assert len(mine) == 1, f"{case.id}: expected exactly one turn, got {len(mine)}"
    thread = mine[0]["thread"]
    if "thread" in case.expect:
        assert thread["thread"] == case.expect["thread"]
    if "chat" in case.expect:
        assert thread["chat"] == case.expect["chat"]


def test_the_corpus_is_large_and_sourced() -> None:
    assert len(CASES) >= 110
    assert len({c.id for c in CASES}) == len(CASES)
    kinds = {c.kind for c in CASES}
    assert {"event", "command", "interactivity", "url_verification", "app_rate_limited"} <= kinds
    assert any(gone(c) for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_http_replay(replayed: Replayed, case: Case) -> None:
    """Both deliveries get the expected status; at most the expected one turn."""
    assert replayed.statuses[case.id] == [case.status, case.status]
    check_turns(case, replayed.turns)


def test_http_replay_sent_nothing_and_queued_only_expected_turns(replayed: Replayed) -> None:
    expected = sum(c.outcome == "turn" for c in CASES)
    assert len(replayed.turns) == expected
    assert replayed.sent == []  # read before after_uninstall's own sends


def test_an_uninstalled_workspace_gets_nothing_the_others_do(replayed: Replayed) -> None:
    assert replayed.refused.startswith("permanent=True: not sent: ")
    assert replayed.home_sent


@pytest.mark.parametrize("case", SOCKET, ids=[c.id for c in SOCKET])
def test_socket_mode_replay(replayed: Replayed, case: Case) -> None:
    """Each envelope and its redelivery acked; the same turns as over HTTP."""
    assert replayed.socket_acks[case.id] == 2
    check_turns(case, replayed.socket_turns)
