"""Cost that matches the bill through the real run lifecycle and Redis: a model that reports
cached and reasoning tokens (and one whose usage fanbot had to count) ends in a run record,
``/subagents info`` and an announce that show them, at the hand-computed cost."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

import pytest

from bot.agent.completion import Completion, CompletionRequest
from bot.agent.subagent import SubagentBody
from bot.commands.answers import render_info
from bot.config import Price, Settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.testing.function_model import FunctionModel
from bot.testing.scripted import Call, ChatRequest, Reply, Text, ToolCalls
from bot.types import RunRecord, RunStatus, Usage
from tests.integration.test_finalize import make_run

PRICE = Price(input=2.0, output=8.0, cached_input=0.5)


class BilledModel(FunctionModel):
    """An in-process model whose n-th completion reports ``usages[n]``, as a provider's
    usage chunk would (``prompt_tokens_details`` / ``completion_tokens_details``)."""

    def __init__(self, usages: Sequence[Usage]) -> None:
        super().__init__(self.reply, models=["fake-model"])
        self.usages = list(usages)

    def reply(self, request: ChatRequest) -> Reply:
        if len(self.requests) < len(self.usages):
            return ToolCalls([Call("calculate", {"expression": "6*7"})])
        return Text("The answer is 42.")

    def complete(self, request: CompletionRequest) -> Completion:
        done = super().complete(request)
        return dataclasses.replace(done, usage=self.usages[len(self.requests) - 1])


async def run_billed(redis_url: str, usages: Sequence[Usage]) -> tuple[RunRecord, str, Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={"base_url": "http://127.0.0.1:9/v1", "model": "fake-model", "max_retries": 0},
        prices={"fake-model": PRICE},
    )
    deps = Deps.build(settings)
    make_run(deps, "r1", task="what is 6*7?", model="fake-model")
    body = SubagentBody(deps=deps, model=BilledModel(usages))
    await asyncio.to_thread(execute_run, deps, "r1", body)
    record = deps.runs.get("r1")
    assert record is not None
    entries = deps.redis.xrange(deps.keys.outbox)
    announce = json.loads(entries[-1][1][b"data"])["text"]
    return record, announce, deps


async def test_cached_and_reasoning_tokens_reach_the_record_info_and_announce(
    redis_url: str,
) -> None:
    first = Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=800, reasoning_tokens=60)
    second = Usage(
        prompt_tokens=1200, completion_tokens=50, cached_tokens=1000, reasoning_tokens=20
    )
    record, announce, deps = await run_billed(redis_url, [first, second, second])
    deps.close()
    assert record.status is RunStatus.SUCCESS
    assert record.usage == first + second + second
    assert (record.prompt_tokens, record.cached_tokens) == (3400, 2800)
    assert (record.completion_tokens, record.reasoning_tokens) == (200, 100)
    assert not record.usage_estimated
    # 600 fresh prompt tokens at $2/M, 2800 cached at $0.50/M, 200 output at $8/M
    expected = (600 * 2.0 + 2800 * 0.5 + 200 * 8.0) / 1e6
    assert record.cost_usd == pytest.approx(expected)
    assert "tokens 3.6k (in 3.4k, 2.8k cached / out 200, 100 reasoning) · est $0.0042" in announce
    info = render_info(record, now=record.ended_at or 0.0, transcript_ref="t", archive_at=None)
    assert "• Tokens: 3.6k (in 3.4k, 2.8k cached / out 200, 100 reasoning)" in info
    assert "Cost: est $0.0042" in info


async def test_usage_the_server_did_not_report_is_shown_as_estimated(redis_url: str) -> None:
    reported = Usage(prompt_tokens=1000, completion_tokens=100)
    counted = Usage(prompt_tokens=1100, completion_tokens=20, estimated=True)
    record, announce, deps = await run_billed(redis_url, [reported, counted])
    deps.close()
    assert record.usage_estimated and record.usage.total == 2220
    assert record.cost_usd == pytest.approx((2100 * 2.0 + 120 * 8.0) / 1e6)
    assert "tokens ~2.2k (in 2.1k / out 120) · est $0.0052" in announce
    info = render_info(record, now=record.ended_at or 0.0, transcript_ref="t", archive_at=None)
    assert "• Tokens: ~2.2k (in 2.1k / out 120)" in info
