"""Approvals on Telegram, end to end: the real gateway, forked workers, PTB and the fake Bot
API. A subagent's ``calculate`` call needs approval: the run parks, the request comes with an
inline keyboard, a press (``callback_query``) decides, ``answerCallbackQuery`` answers, the
request is edited to the outcome and the run resumes as a new job."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis
from rq.job import Job

from adapters.telegram import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, SentMessage, group, user
from bot.testing.stack import Stack
from tests.e2e.approvals_script import model
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

GROUP = group()
BOT = "@fanbot_bot"
ANN = user(1001, "Ann", username="ann")  # starts the runs
BOB = user(1002, "Bob", username="bob")  # neither requester nor admin


@asynccontextmanager
async def running(redis_url: str, **extra: Any) -> AsyncIterator[tuple[FakeTelegram, Stack]]:
    async with FakeOpenAI(model()) as fake_model, FakeTelegram() as tg:
        tg_values = {
            "bot_token": tg.token,
            "api_url": tg.api_url,
            "file_url": tg.file_url,
            "poll_timeout_seconds": 1,
        }
        values = stack_values(
            redis_url,
            fake_model.base_url,
            telegram=tg_values,
            tools={"require_approval": ["calc*"]},
            **extra,
        )
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            yield tg, stack


def request_of(tg: FakeTelegram) -> SentMessage | None:
    return next((m for m in tg.messages if m.text.startswith("🔐")), None)


def announce(tg: FakeTelegram) -> str:
    found = [m.text for m in tg.messages if re.search(r"Subagent #\d+ .* finished", m.text)]
    return found[0] if found else ""


async def parked_request(tg: FakeTelegram, stack: Stack) -> tuple[SentMessage, str]:
    tg.push(tg.message(chat=GROUP, text=f"{BOT} go", sender=ANN))
    await stack.wait_for(lambda: request_of(tg) is not None, timeout=30)
    sent = request_of(tg)
    assert sent is not None
    found = re.search(r"\bid ([0-9a-f]{8})\b", sent.text)
    assert found is not None
    return sent, found[1]


def resume_worker(redis_url: str, approval_id: str) -> str:
    client = redis.Redis.from_url(redis_url)
    try:
        job = Job.fetch(f"approval-{approval_id}", connection=client)
        return str(job.worker_name)
    finally:
        client.close()


async def test_approved_after_the_worker_died_while_parked(redis_url: str) -> None:
    async with running(redis_url) as (tg, stack):
        sent, approval_id = await parked_request(tg, stack)
        assert [b["text"] for b in sent.buttons()] == ["✅ Approve", "❌ Deny"]
        assert "run calculate" in sent.text and '"expression": "6*7"' in sent.text
        first_workers = stack.pool.worker_pids()
        await stack.wait_for(lambda: "waiting for approval" in _status_texts(tg), timeout=10)
        stack.pool.kill_all()  # the host dies while the run waits: no job holds it
        stack.pool.start()
        tg.push(tg.callback_query(sent, f"!approve {approval_id}", sender=ANN))
        await stack.wait_for(lambda: "answer: 42" in announce(tg), timeout=40)
        await stack.wait_for(lambda: bool(tg.callback_answers), timeout=10)
    assert sent.text.startswith("✅") and "approved by @1001" in sent.text
    assert sent.buttons() == []  # the edit removed the keyboard
    [answer] = tg.callback_answers
    assert not answer.show_alert and "approved" in answer.text
    assert "`" not in answer.text  # a toast is plain text
    assert set(stack.pool.worker_pids()).isdisjoint(first_workers)
    assert resume_worker(redis_url, approval_id)  # a new job, on a worker of the new host


async def test_someone_else_is_refused_then_the_requester_denies(redis_url: str) -> None:
    async with running(redis_url) as (tg, stack):
        sent, approval_id = await parked_request(tg, stack)
        tg.push(tg.callback_query(sent, f"!approve {approval_id}", sender=BOB))
        await stack.wait_for(lambda: len(tg.callback_answers) == 1, timeout=15)
        assert sent.buttons()  # still waiting
        tg.push(tg.callback_query(sent, f"!deny {approval_id}", sender=ANN))
        await stack.wait_for(lambda: "denied by @1001" in announce(tg), timeout=40)
    refusal, decided = tg.callback_answers
    assert refusal.show_alert and "only the person who started" in refusal.text
    assert not decided.show_alert
    assert sent.text.startswith("❌") and "denied by @1001" in sent.text
    assert "answer: error: denied by @1001; the call did not run" in announce(tg)


async def test_no_answer_in_time_means_deny(redis_url: str) -> None:
    async with running(redis_url, approvals={"timeout_seconds": 2}) as (tg, stack):
        sent, _ = await parked_request(tg, stack)
        await stack.wait_for(lambda: "nobody answered in time" in announce(tg), timeout=40)
    assert sent.text.startswith("⌛") and "no answer in time" in sent.text
    assert sent.buttons() == []


async def test_a_typed_approve_with_new_arguments(redis_url: str) -> None:
    async with running(redis_url) as (tg, stack):
        sent, approval_id = await parked_request(tg, stack)
        args = json.dumps({"expression": "2+2"})
        tg.push(tg.message(chat=GROUP, text=f"!approve {approval_id} {args}", sender=BOB))
        await stack.wait_for(
            lambda: any("only the person" in m.text for m in tg.messages), timeout=15
        )
        tg.push(tg.message(chat=GROUP, text=f"!approve {approval_id} {args}", sender=ANN))
        await stack.wait_for(lambda: "answer: 4" in announce(tg), timeout=40)
    assert "approved with edited arguments by @1001" in sent.text


def _status_texts(tg: FakeTelegram) -> str:
    return " ".join(m.text for m in tg.messages if m.edits)
