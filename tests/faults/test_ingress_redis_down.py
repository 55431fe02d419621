"""Redis down while messages arrive, on every platform: none is lost, none is doubled.

The real gateway (its ingest writes the dedupe key and enqueues the turn in Redis) runs
each real adapter against its platform: the Slack and Telegram fakes, a real Synapse. The
test's own ``redis-server`` is stopped, messages arrive, the gateway's ingest fails on
each, and the test checks that the platform was not told the message was taken (no Socket
Mode ack, no 2xx, no Telegram offset past it, no Matrix sync token past it). When Redis is
back, every message gets exactly one ``run_turn`` job (no worker runs; the job hashes in
Redis are counted, queued or waiting in their session's lane).

The gateway here uses a Redis client without retries: the production client rides out a
short outage by itself for ~30 s, which would hide what is tested here, namely what the
adapters do once ingest has failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq.job import Job
from rq.serializers import JSONSerializer

from adapters.matrix import MatrixChannel
from adapters.slack import SlackChannel
from adapters.telegram.channel import TelegramChannel
from bot.commands import default_router
from bot.commands.router import CommandRequest, CommandRouter
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.runtime import Gateway
from bot.ports import ChannelAdapter
from bot.redis.server import RedisServer
from bot.testing import until
from bot.testing.fake_slack import FakeSlack, HttpResult
from bot.testing.fake_telegram import FakeTelegram, private, user
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import Inbound
from tests.matrix_support import Human, bot_user, make_human, matrix_settings, register, synapse

__all__ = ["bot_user", "make_human", "register", "synapse"]  # fixtures

pytestmark = pytest.mark.e2e

N = 3
TURN_JOB = "workers.jobs.run_turn"


class CountingGateway(Gateway):
    """The real gateway, counting the messages its ingest failed on."""

    refused = 0

    async def ingest(self, inbound: Inbound) -> Any:
        try:
            return await super().ingest(inbound)
        except Exception:
            self.refused += 1
            raise


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own: the session's one must not be stopped under others."""
    own = RedisServer(data_dir=tmp_path / "redis").start()
    yield own
    own.stop()


@contextlib.asynccontextmanager
async def gateway(
    server: RedisServer, adapter: ChannelAdapter, router: CommandRouter | None = None, **values: Any
) -> AsyncIterator[CountingGateway]:
    settings = Settings(redis_url=server.url, **values)
    client = redis.Redis.from_url(
        server.url, socket_connect_timeout=1, socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )
    deps = Deps.build(settings, client=client)
    running = CountingGateway(settings=settings, adapters=[adapter], deps=deps, router=router)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def turn_message_ids(url: str) -> list[str]:
    """The message id of every ``run_turn`` job in Redis (queued, or waiting in its lane)."""
    conn = redis.Redis.from_url(url)
    try:
        keys = [k.decode() for k in conn.scan_iter(match="rq:job:*")]
        ids = [k.removeprefix("rq:job:") for k in keys if k.count(":") == 2]
        jobs = Job.fetch_many(ids, connection=conn, serializer=JSONSerializer)
        return [j.args[0]["message_id"] for j in jobs if j is not None and j.func_name == TURN_JOB]
    finally:
        conn.close()


async def wait_for_turns(url: str, expected: list[str], timeout: float = 60) -> None:
    async def enough() -> bool:
        return len(await asyncio.to_thread(turn_message_ids, url)) >= len(expected)

    await until(enough, timeout=timeout)
    # Every confirmation the test waited for comes after the sink call it confirms, so a
    # duplicate turn, if the adapters made one, would be in Redis by now.
    assert Counter(await asyncio.to_thread(turn_message_ids, url)) == Counter(expected)


# -- Telegram ------------------------------------------------------------------------------


def telegram_channel(tg: FakeTelegram, **kwargs: Any) -> TelegramChannel:
    return TelegramChannel(
        token=tg.token, api_url=tg.api_url, file_url=tg.file_url, poll_timeout=2, **kwargs
    )


def push_dms(tg: FakeTelegram) -> tuple[list[int], list[str]]:
    """``N`` direct messages from different people; their update ids and dedupe ids."""
    updates = []
    for i in range(N):
        person = user(700 + i, f"P{i}")
        updates.append(tg.push(tg.message(chat=private(person), sender=person, text=f"hi {i}")))
    ids = [u["update_id"] for u in updates]
    dedupe = [f"{u['message']['chat']['id']}:{u['message']['message_id']}" for u in updates]
    return ids, dedupe


async def test_telegram_polling_keeps_the_offset_until_redis_is_back(server: RedisServer) -> None:
    async with FakeTelegram() as tg, gateway(server, telegram_channel(tg)) as gw:
        server.stop()
        update_ids, expected = push_dms(tg)
        await until(lambda: gw.refused >= 2, timeout=30)  # refused, fetched and refused again
        assert set(update_ids) <= {u["update_id"] for u in tg.pending_updates}
        server.start()
        await until(lambda: not tg.pending_updates, timeout=60)  # confirmed, once taken
        await wait_for_turns(server.url, expected)


async def test_telegram_webhook_answers_503_until_redis_is_back(server: RedisServer) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}/tg/hook"
    async with FakeTelegram() as tg:
        channel = telegram_channel(tg, webhook_url=url, webhook_secret="s3cret")
        async with gateway(server, channel, gateway={"http_port": port}) as gw:
            server.stop()
            update_ids, expected = push_dms(tg)
            await until(lambda: gw.refused >= 2, timeout=30)
            assert {status for _, status in tg.webhook_deliveries} == {503}
            assert set(update_ids) <= {u["update_id"] for u in tg.pending_updates}
            server.start()
            await until(lambda: not tg.pending_updates, timeout=60)
            await wait_for_turns(server.url, expected)
    answered = {uid: s for uid, s in tg.webhook_deliveries if s == 200}
    assert sorted(answered) == sorted(update_ids)


async def test_a_message_that_crashes_ingress_is_dropped_not_retried_forever(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug, not an outage: retrying would fail the same way and hold up every later update.
    def boom(request: CommandRequest) -> str:
        raise RuntimeError("a bug in a command handler")

    router = default_router()
    router.register("boom", boom)
    person = user(800, "Dee")
    async with FakeTelegram() as tg, gateway(server, telegram_channel(tg), router=router):
        tg.push(tg.message(chat=private(person), sender=person, text="/boom"))
        after = tg.push(tg.message(chat=private(person), sender=person, text="and then?"))
        await until(lambda: not tg.pending_updates, timeout=30)
        await wait_for_turns(server.url, [f"800:{after['message']['message_id']}"])
    crashes = [r for r in caplog.records if r.name == "bot.gateway.runtime" and r.exc_info]
    assert len(crashes) == 1


# -- Slack ---------------------------------------------------------------------------------


def mentions(slack: FakeSlack) -> list[dict[str, Any]]:
    """``N`` top-level mentions: each opens its own thread (its own session)."""
    return [slack.app_mention(text=f"<@{slack.bot_user_id}> job {i}") for i in range(N)]


async def test_slack_socket_acks_nothing_until_redis_is_back(server: RedisServer) -> None:
    # Slack's timed retries, compressed: the adapter must survive them during the outage.
    slack = FakeSlack(ack_timeout=1.0, retry_delays=(0.0, 0.5, 0.5))
    async with slack, gateway(server, SlackChannel(settings=slack.settings())) as gw:
        await slack.wait_connected()
        server.stop()
        events = mentions(slack)
        for event in events:
            await slack.push_event(event)
        await until(lambda: len(slack.envelopes) >= 2 * N, timeout=30)  # Slack retried
        assert gw.refused >= N and all(e.ack is None for e in slack.envelopes)
        server.start()
        await until(lambda: all(e.ack for e in slack.envelopes), timeout=60)
        await wait_for_turns(server.url, [f"C0GENERAL:{e['ts']}" for e in events])


async def test_slack_http_keeps_trying_after_slack_gave_up(server: RedisServer) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}/slack/events"
    async with FakeSlack(ack_timeout=3.0, retry_delays=(0.0, 0.2, 0.2)) as slack:
        channel = SlackChannel(settings=slack.settings(mode="http", app_token=None))
        async with gateway(server, channel, gateway={"http_port": port}):
            server.stop()
            events = mentions(slack)
            bodies = [slack.event_body(e) for e in events]
            tries = await asyncio.gather(*(slack.deliver_http_retrying(url, b) for b in bodies))
            # Slack got no 2xx for any attempt and gave up; the adapter still holds them.
            assert {r.status for attempts in tries for r in attempts} == {503}
            server.start()
            await wait_for_turns(server.url, [f"C0GENERAL:{e['ts']}" for e in events])
            late: list[HttpResult] = [await slack.deliver_http(url, b, retry_num=4) for b in bodies]
            assert [r.status for r in late] == [200] * N  # taken already: a no-op
            await wait_for_turns(server.url, [f"C0GENERAL:{e['ts']}" for e in events])


# -- Matrix --------------------------------------------------------------------------------


async def test_matrix_keeps_the_sync_token_until_redis_is_back(
    server: RedisServer,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    human = make_human("carol")
    settings = matrix_settings(synapse, bot_user, allow=[human.user.user_id])
    channel = MatrixChannel(settings=settings, store_path=tmp_path / "matrix")
    async with gateway(server, channel) as gw:
        room = await human.create_room(invite=[bot_user.user_id])
        await human.wait_joined(room, bot_user.user_id)
        server.stop()
        sent = [await human.send(room, f"question {i}") for i in range(N)]
        await until(lambda: gw.refused >= 2, timeout=30)  # the same batch synced again
        server.start()
        await wait_for_turns(server.url, sent)
