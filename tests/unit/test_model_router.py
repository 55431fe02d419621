"""The model router: which endpoint a model name reaches, and which fallback answers when
that endpoint cannot (docs/models.md, "Named endpoints" and "Fallbacks")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest

from bot.agent.model_errors import model_error_text
from bot.agent.router import ModelRouter, failed_at
from bot.config import OpenAISettings, Settings
from bot.models.completion import Completion, CompletionRequest
from bot.observe.metric_defs import configured_models
from bot.observe.scope import bound, model_call

Outcome = Completion | BaseException | Callable[[CompletionRequest], Completion]


def request_to(url: str) -> httpx2.Request:
    return httpx2.Request("POST", url + "chat/completions")


def status_error(url: str, status: int, **error: Any) -> openai.APIStatusError:
    body = {"error": {"message": "words", "type": "x", **error}}
    response = httpx2.Response(status, request=request_to(url), json=body)
    cls = openai.InternalServerError if status >= 500 else openai.BadRequestError
    if status == 429:
        cls = openai.RateLimitError
    if status == 401:
        cls = openai.AuthenticationError
    return cls(str(error.get("message", "words")), response=response, body=body["error"])


class Endpoint:
    """One endpoint's client: answers from a script of outcomes, records what it was asked."""

    def __init__(self, settings: OpenAISettings, script: list[Outcome], models: Any) -> None:
        self.settings = settings
        self.script = script
        self.models = models
        self.asked: list[CompletionRequest] = []
        self.listed = 0
        self.closed = False

    @property
    def base_url(self) -> str:
        return str(self.settings.base_url)

    def complete(self, request: CompletionRequest) -> Completion:
        self.asked.append(request)
        outcome = self.script.pop(0) if self.script else Completion(content="ok")
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, Completion):
            return outcome
        return outcome(request)

    def known_models(self) -> frozenset[str] | None:
        self.listed += 1
        return None if self.models is None else frozenset(self.models)

    def close(self) -> None:
        self.closed = True


URLS = {
    "default": "http://cloud.test/v1/",
    "local": "http://local.test/v1/",
    "spare": "http://spare.test/v1/",
}


class Fleet:
    """Endpoints by base URL, built by the router's factory as it asks for them."""

    def __init__(self, scripts: dict[str, list[Outcome]], models: dict[str, Any]) -> None:
        self.scripts, self.models = scripts, models
        self.built: dict[str, list[Endpoint]] = {}
        self.lock = threading.Lock()

    def build(self, settings: OpenAISettings) -> Endpoint:
        name = next(n for n, u in URLS.items() if u == settings.base_url)
        with self.lock:
            endpoint = Endpoint(settings, self.scripts.setdefault(name, []), self.models.get(name))
            self.built.setdefault(name, []).append(endpoint)
        return endpoint

    def asked(self, name: str) -> list[CompletionRequest]:
        return [r for e in self.built.get(name, []) for r in e.asked]


def settings(**models: Any) -> Settings:
    return Settings(
        openai={"base_url": URLS["default"], "model": "gpt-4o"},
        models={
            "endpoints": {
                "local": {"base_url": URLS["local"], "model": "qwen3", "max_output_tokens": 500},
                "spare": {"base_url": URLS["spare"], "model": "m", "models": ["m", "n"]},
            },
            "models": models
            or {
                "gpt-4o": {"fallbacks": ["local/qwen3", "spare/m"]},
                "local/big": {"max_output_tokens": 9},
            },
        },
    )


def router(
    scripts: dict[str, list[Outcome]] | None = None,
    models: dict[str, Any] | None = None,
    s: Settings | None = None,
) -> tuple[ModelRouter, Fleet]:
    fleet = Fleet(scripts or {}, models or {})
    return ModelRouter(s or settings(), client=fleet.build), fleet


def ask(model: ModelRouter, name: str, **options: Any) -> Completion:
    return model.complete(
        CompletionRequest(model=name, messages=[{"role": "user", "content": "hi"}], **options)
    )


def test_a_named_model_goes_to_its_endpoint_with_its_wire_name() -> None:
    model, fleet = router()
    done = ask(model, "local/qwen3")
    assert [r.model for r in fleet.asked("local")] == ["qwen3"]
    assert fleet.asked("default") == []
    assert done.answered_by == "local/qwen3"
    assert done.fallback_reason == ""


@pytest.mark.parametrize("name", ["gpt-4o", "default/gpt-4o", ""])
def test_the_default_endpoint_is_named_bare(name: str) -> None:
    model, fleet = router()
    assert ask(model, name).answered_by == "gpt-4o"
    assert [r.model for r in fleet.asked("default")] == ["gpt-4o"]


def test_a_first_part_that_is_no_endpoint_is_a_default_model_whole() -> None:
    model, fleet = router()
    assert ask(model, "openai/gpt-4o").answered_by == "openai/gpt-4o"
    assert [r.model for r in fleet.asked("default")] == ["openai/gpt-4o"]


def test_each_endpoint_gets_one_client_and_a_model_its_own_output_limit() -> None:
    model, fleet = router()
    ask(model, "local/qwen3")
    ask(model, "local/qwen3")
    ask(model, "local/big")
    limits = sorted(e.settings.max_output_tokens or 0 for e in fleet.built["local"])
    assert limits == [9, 500]
    model.close()
    assert all(e.closed for e in fleet.built["local"])


def test_fallbacks_are_asked_in_order_until_one_answers() -> None:
    scripts: dict[str, list[Outcome]] = {
        "default": [status_error(URLS["default"], 529, type="overloaded_error")],
        "local": [openai.APIConnectionError(request=request_to(URLS["local"]))],
        "spare": [Completion(content="from spare")],
    }
    model, fleet = router(scripts)
    done = ask(model, "gpt-4o")
    assert done.content == "from spare"
    assert done.answered_by == "spare/m"
    assert done.fallback_reason == "gpt-4o overloaded, local/qwen3 unreachable"
    assert [len(fleet.asked(n)) for n in ("default", "local", "spare")] == [1, 1, 1]
    assert fleet.asked("spare")[0].model == "m"


def test_a_rate_limit_past_patience_falls_back() -> None:
    scripts: dict[str, list[Outcome]] = {"default": [status_error(URLS["default"], 429)]}
    model, _ = router(scripts)
    done = ask(model, "gpt-4o")
    assert (done.answered_by, done.fallback_reason) == ("local/qwen3", "gpt-4o rate limited")


def test_a_call_that_streamed_text_is_not_asked_elsewhere() -> None:
    def half(request: CompletionRequest) -> Completion:
        assert request.on_text is not None
        request.on_text(12)
        raise openai.APIConnectionError(request=request_to(URLS["default"]))

    seen: list[int] = []
    model, fleet = router({"default": [half]})
    with pytest.raises(openai.APIConnectionError) as raised:
        ask(model, "gpt-4o", on_text=seen.append)
    assert seen == [12]  # the caller's own on_text still hears the text
    assert fleet.asked("local") == []
    where = failed_at(raised.value)
    assert where is not None and where.name == "gpt-4o" and where.tried == ()


def test_context_too_long_never_falls_back() -> None:
    too_long = status_error(URLS["default"], 400, code="context_length_exceeded")
    model, fleet = router({"default": [too_long]})
    with pytest.raises(openai.BadRequestError):
        ask(model, "gpt-4o")
    assert fleet.asked("local") == []


def test_other_failures_are_said_as_they_are() -> None:
    model, fleet = router({"default": [status_error(URLS["default"], 401)]})
    with pytest.raises(openai.AuthenticationError):
        ask(model, "gpt-4o")
    assert fleet.asked("local") == []


def test_no_fallback_without_time_left() -> None:
    down = openai.APIConnectionError(request=request_to(URLS["default"]))
    model, fleet = router({"default": [down]})
    with pytest.raises(openai.APIConnectionError):
        ask(model, "gpt-4o", timeout=0.5, budget=0.5)
    assert fleet.asked("local") == []


def test_a_model_without_fallbacks_raises_its_failure() -> None:
    down = openai.APIConnectionError(request=request_to(URLS["local"]))
    model, _ = router({"local": [down]})
    with pytest.raises(openai.APIConnectionError) as raised:
        ask(model, "local/qwen3")
    where = failed_at(raised.value)
    assert where is not None and where.base_url == URLS["local"]


def test_when_every_fallback_fails_the_error_names_the_last_endpoint() -> None:
    scripts: dict[str, list[Outcome]] = {
        "default": [status_error(URLS["default"], 503)],
        "local": [status_error(URLS["local"], 529)],
        "spare": [openai.APIConnectionError(request=request_to(URLS["spare"]))],
    }
    model, _ = router(scripts)
    with pytest.raises(openai.APIConnectionError) as raised:
        ask(model, "gpt-4o")
    text = model_error_text(raised.value, base_url=model.base_url, model="gpt-4o")
    assert text == (
        "cannot reach the model endpoint at http://spare.test/v1 "
        "(fallback spare/m, after gpt-4o overloaded, local/qwen3 overloaded)"
    )


def test_an_error_names_the_endpoint_that_failed() -> None:
    down = openai.APIConnectionError(request=request_to(URLS["local"]))
    model, _ = router({"local": [down]})
    with pytest.raises(openai.APIConnectionError) as raised:
        ask(model, "local/qwen3")
    text = model_error_text(raised.value, base_url=model.base_url, model="local/qwen3")
    assert text == "cannot reach the model endpoint at http://local.test/v1"
    assert model.base_url == URLS["default"]
    assert model.base_url_of("local/qwen3") == URLS["local"]


def test_known_models_name_other_endpoints_models_with_their_endpoint() -> None:
    model, fleet = router(models={"default": ["gpt-4o", "gpt-4.1"], "local": ["qwen3", "llama"]})
    known = model.known_models()
    assert known == {"gpt-4o", "gpt-4.1", "local/qwen3", "local/llama", "spare/m", "spare/n"}
    model.known_models()
    assert [e.listed for e in fleet.built["local"]] == [1]  # asked once


def test_an_endpoint_that_cannot_list_gives_its_configured_models() -> None:
    model, _ = router(models={"default": ["gpt-4o"], "local": ["qwen3"]})
    assert "spare/n" in (model.known_models() or ())


def test_only_the_default_endpoint_says_what_it_lists_or_nothing() -> None:
    bare = Settings(openai={"base_url": URLS["default"], "model": "gpt-4o"})
    model, _ = router(s=bare)
    assert model.known_models() is None
    model, _ = router(s=bare, models={"default": ["gpt-4o"]})
    assert model.known_models() == {"gpt-4o"}


def test_a_named_endpoints_calls_are_reported_under_the_fanbot_name() -> None:
    def observed(request: CompletionRequest) -> Completion:
        with model_call(request.model):  # as the endpoint's client reports its calls
            return Completion(content="ok")

    reports: list[tuple[str, bool]] = []
    model, _ = router({"local": [observed], "default": [observed]})
    with bound(on_model_call=lambda name, usage, ok: reports.append((name, ok))):
        ask(model, "local/qwen3")
        ask(model, "gpt-4o")
    assert reports == [("local/qwen3", True), ("gpt-4o", True)]


def test_observed_names_include_the_named_endpoints_models() -> None:
    assert {"local/qwen3", "spare/n"} <= configured_models(settings())
