"""Fleet-wide model limits (issue 27): one window per endpoint in Redis, shared by every
process and thread; a 429's ``Retry-After`` pauses every caller of the endpoint."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import openai
import pytest
import redis

from bot.agent import llm
from bot.agent.llm import WAITING_FOR_RATE_LIMIT, ModelRateLimited, OpenAIChatModel
from bot.agent.model_errors import model_error_text
from bot.config import OpenAISettings
from bot.keys import Keys
from bot.models.completion import CompletionRequest
from bot.store.model_limits import WINDOW_MS, ModelLimits, endpoint_id
from bot.supervise import abort
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Fail, ScriptedModel, Text

KEYS = Keys(prefix="t:")
ENDPOINT = endpoint_id("http://127.0.0.1:1/v1")
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture
def limits(rconn: redis.Redis) -> ModelLimits:
    return ModelLimits(redis=rconn, keys=KEYS)


@pytest.fixture
def other(redis_url: str) -> Iterator[ModelLimits]:
    """A second caller: its own connection, as another worker process has."""
    client = redis.Redis.from_url(redis_url)
    yield ModelLimits(redis=client, keys=KEYS)
    client.close()


def test_threads_on_their_own_connections_share_one_request_window(redis_url: str) -> None:
    grants: list[bool] = []
    lock = threading.Lock()

    def caller() -> None:
        client = redis.Redis.from_url(redis_url)
        mine = ModelLimits(redis=client, keys=KEYS)
        for _ in range(4):
            got = mine.acquire(ENDPOINT, max_requests=10, max_tokens=None, tokens=5)
            with lock:
                grants.append(got.granted)
        client.close()

    threads = [threading.Thread(target=caller) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert grants.count(True) == 10 and grants.count(False) == 10


def test_another_process_uses_the_same_window(limits: ModelLimits, redis_url: str) -> None:
    script = (
        "import redis; from bot.keys import Keys; from bot.store.model_limits import ModelLimits;"
        f"m = ModelLimits(redis=redis.Redis.from_url({redis_url!r}), keys=Keys(prefix='t:'));"
        f"print(sum(m.acquire({ENDPOINT!r}, max_requests=5, max_tokens=None, tokens=1).granted"
        " for _ in range(3)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "3"
    mine = [limits.acquire(ENDPOINT, max_requests=5, max_tokens=None, tokens=1) for _ in range(3)]
    assert [g.granted for g in mine] == [True, True, False]
    refused = mine[-1]
    assert refused.why == "requests" and 0 < refused.wait * 1000 <= WINDOW_MS + 1000


def test_tokens_are_reserved_from_the_estimate_and_settled_to_the_real_use(
    limits: ModelLimits, other: ModelLimits
) -> None:
    first = limits.acquire(ENDPOINT, max_requests=None, max_tokens=100, tokens=60)
    assert first.granted
    full = other.acquire(ENDPOINT, max_requests=None, max_tokens=100, tokens=60)
    assert not full.granted and full.why == "tokens" and full.wait > 0
    limits.settle(ENDPOINT, first.grant_id, tokens=10)  # it used far less than its estimate
    assert other.acquire(ENDPOINT, max_requests=None, max_tokens=100, tokens=60).granted
    assert not other.acquire(ENDPOINT, max_requests=None, max_tokens=100, tokens=60).granted


def test_no_limits_grant_everything(limits: ModelLimits) -> None:
    for _ in range(50):
        assert limits.acquire(ENDPOINT, max_requests=0, max_tokens=None, tokens=10**9).granted


def test_a_pause_holds_every_caller_even_without_limits(
    limits: ModelLimits, other: ModelLimits
) -> None:
    limits.pause(ENDPOINT, 20)
    held = other.acquire(ENDPOINT, max_requests=None, max_tokens=None, tokens=1)
    assert not held.granted and held.why == "paused" and 15 < held.wait <= 20
    other.pause(ENDPOINT, 1)  # a shorter pause never shortens a longer one
    assert other.acquire(ENDPOINT, max_requests=None, max_tokens=None, tokens=1).wait > 15
    assert limits.acquire(endpoint_id("http://elsewhere/v1"), max_requests=None, max_tokens=None,
                          tokens=1).granted  # fmt: skip


def _model(base_url: str, client: redis.Redis, **limits: int) -> OpenAIChatModel:
    settings = OpenAISettings(base_url=base_url, model="fake-model", **limits)
    return OpenAIChatModel(settings=settings, limits=ModelLimits(redis=client, keys=KEYS))


def test_a_429_from_the_endpoint_pauses_a_second_caller(redis_url: str) -> None:
    one, two = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)
    with FakeOpenAI(ScriptedModel(default=Text("ok")), max_requests=1, window_seconds=30) as fake:
        first, second = _model(fake.base_url, one), _model(fake.base_url, two)
        ask = CompletionRequest(model="fake-model", messages=ASK, budget=5.0)
        assert first.complete(ask).content == "ok"
        with pytest.raises(openai.RateLimitError):  # 429, Retry-After ~30 s: no retry fits
            first.complete(ask)
        # The second caller never got a 429 itself, yet does not send: the pause holds it.
        with pytest.raises(ModelRateLimited, match="paused"):
            second.complete(ask)
        assert fake.over_limit == 1 and len(fake.requests) == 2
        first.close(), second.close()
    one.close(), two.close()


def test_a_wait_is_told_to_the_card_and_cleared_then_the_call_goes(
    limits: ModelLimits, rconn: redis.Redis
) -> None:
    with FakeOpenAI(ScriptedModel(default=Text("ok"))) as fake:
        model = _model(fake.base_url, rconn, max_requests_per_minute=100)
        limits.pause(endpoint_id(model.base_url), 0.3)
        heard: list[str] = []
        ask = CompletionRequest(model="fake-model", messages=ASK, on_wait=heard.append, budget=30)
        assert model.complete(ask).content == "ok"
        model.close()
    assert heard[0] == WAITING_FOR_RATE_LIMIT == "waiting for the model's rate limit"
    assert heard[-1] == "" and len(fake.requests) == 1


def test_a_retry_after_429_is_ours_not_the_sdks_and_waits_for_the_pause(
    rconn: redis.Redis,
) -> None:
    script = ScriptedModel(default=Text("ok")).on("hi", Fail(429, retry_after=0.2), times=1)
    with FakeOpenAI(script) as fake:
        model = _model(fake.base_url, rconn)
        heard: list[str] = []
        ask = CompletionRequest(model="fake-model", messages=ASK, on_wait=heard.append)
        assert model.complete(ask).content == "ok"
        model.close()
    assert [r.status for r in fake.requests] == [429, 200]
    assert [r.retry_count for r in fake.requests] == [0, 1]  # ours, numbered as the SDK would
    assert heard == [WAITING_FOR_RATE_LIMIT, ""]


def test_a_stop_during_the_wait_ends_the_call(limits: ModelLimits, rconn: redis.Redis) -> None:
    with FakeOpenAI(ScriptedModel(default=Text("ok"))) as fake:
        model = _model(fake.base_url, rconn)
        limits.pause(endpoint_id(model.base_url), 300)
        run = abort.Abort()
        waiting = threading.Event()
        outcome: list[BaseException] = []

        def call() -> None:
            ask = CompletionRequest(
                model="fake-model", messages=ASK, on_wait=lambda _: waiting.set()
            )
            with abort.running(run):
                try:
                    model.complete(ask)
                except BaseException as exc:
                    outcome.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        assert waiting.wait(10)
        run.abort("stop")
        thread.join(timeout=10)
        assert not thread.is_alive()
        model.close()
    assert isinstance(outcome[0], abort.Aborted) and fake.requests == []


def test_retry_after_headers_are_read() -> None:
    headers = llm.httpx2.Headers
    assert llm.retry_after(headers({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert llm.retry_after(headers({"retry-after": "7"})) == 7.0
    assert llm.retry_after(headers({"retry-after": "99999"})) == llm.MAX_PAUSE
    assert llm.retry_after(headers({"retry-after": "soon"})) is None
    assert llm.retry_after(headers({})) is None


def test_a_short_window_scales_the_minute(limits: ModelLimits) -> None:
    grants = [
        limits.acquire(ENDPOINT, max_requests=120, max_tokens=None, tokens=1, window_seconds=2)
        for _ in range(5)
    ]
    assert [g.granted for g in grants] == [True] * 4 + [False]  # 120 a minute = 4 per 2 s
    assert 0 < grants[-1].wait <= 2.2


def test_the_deadline_error_reads_as_the_rate_limit() -> None:
    exc = ModelRateLimited("x", llm.httpx2.Request("POST", "http://m/v1"), body=None)
    text = model_error_text(exc, base_url="http://m/v1", model="m")
    assert text == "the model's rate limit leaves no room before the run's deadline"
