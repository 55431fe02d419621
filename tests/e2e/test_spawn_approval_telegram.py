"""A spawn held for its cost estimate, end to end on Telegram: the real gateway, a forked
worker, PTB and the fake Bot API. Recent explore runs on the model cost $0.02-$0.09 (p90
$0.09) and ``FANBOT_BUDGETS__APPROVE_ABOVE_USD`` is $0.05, so ``/subagents spawn explore``
answers that it waits, the request comes with its estimate and an inline keyboard, nothing
reaches the model, and a press of Approve starts the run, which then announces."""

from __future__ import annotations

import re

import pytest
import redis

from adapters.telegram import build
from bot.config import Settings
from bot.keys import Keys
from bot.store.estimates import Sample
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, SentMessage, group, user
from bot.testing.scripted import ScriptedModel, Text, is_subagent
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

GROUP = group()
BOT = "@fanbot_bot"
ANN = user(1001, "Ann", username="ann")
PAST = ((2000, 0.02), (9000, 0.09), (4000, 0.04))


def seed(redis_url: str) -> None:
    """The explore runs that finished on ``fake-model`` before (as the finalize script
    keeps them; that path has its own tests)."""
    client = redis.Redis.from_url(redis_url)
    key = Keys().estimate_samples("explore", "fake-model")
    for tokens, cost in PAST:
        client.lpush(key, Sample(tokens=tokens, cost_usd=cost).to_json())
    client.close()


def request_of(tg: FakeTelegram) -> SentMessage | None:
    return next((m for m in tg.messages if "Approve or deny (id" in m.text), None)


def texts(tg: FakeTelegram) -> list[str]:
    return [m.text for m in tg.messages]


async def test_a_spawn_above_the_limit_starts_only_once_approved(redis_url: str) -> None:
    seed(redis_url)
    model = ScriptedModel().on(is_subagent, lambda r: Text("the repo map"))
    async with FakeOpenAI(model) as fake_model, FakeTelegram() as tg:
        values = stack_values(
            redis_url,
            fake_model.base_url,
            telegram={"bot_token": tg.token, "api_url": tg.api_url, "poll_timeout_seconds": 1},
            budgets={"approve_above_usd": 0.05},
            prices={"fake-model": {"input": 10.0, "output": 10.0}},
        )
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=1) as stack:
            spawn = f"{BOT} /subagents spawn explore map the repo"
            tg.push(tg.message(chat=GROUP, text=spawn, sender=ANN))
            await stack.wait_for(lambda: request_of(tg) is not None, timeout=30)
            sent = request_of(tg)
            assert sent is not None
            found = re.search(r"\bid ([0-9a-f]{8})\b", sent.text)
            assert found is not None
            ack = "(estimate above the limit)"
            await stack.wait_for(lambda: any(ack in t for t in texts(tg)), timeout=15)
            assert fake_model.requests == []  # held: nothing was spent
            asked = sent.text
            tg.push(tg.callback_query(sent, f"!approve {found[1]}", sender=ANN))
            await stack.wait_for(lambda: any("the repo map" in t for t in texts(tg)), timeout=40)
    assert "est. ~$0.04 (p90 $0.09) from 3 recent runs, above the $0.05 limit" in asked
    assert sent.text.startswith("✅") and "start approved by @1001" in sent.text
    assert sent.buttons() == []
    [ack] = [t for t in texts(tg) if "(estimate above the limit)" in t]
    assert ack == (
        "🔐 Subagent #1 (explore) waits for approval to start (estimate above the limit): "
        "map the repo\n💰 est. ~$0.04 (p90 $0.09)"
    )
    assert fake_model.requests  # it ran after the approval
