"""What a person reads when a model call fails: one short, specific sentence per cause."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

from bot.agent.model_errors import model_error_text

BASE = "http://llm.internal:8000/v1/"
REQUEST = httpx2.Request("POST", BASE + "chat/completions")


def status_error(cls: type[openai.APIStatusError], status: int, **error: Any) -> openai.APIError:
    body = {"error": {"message": "words", "type": "x", **error}}
    response = httpx2.Response(status, request=REQUEST, json=body)
    return cls(error.get("message", "words"), response=response, body=body["error"])


CASES = [
    (
        status_error(openai.AuthenticationError, 401, code="invalid_api_key"),
        "the model endpoint refused the API key",
    ),
    (
        openai.APIConnectionError(request=REQUEST),
        "cannot reach the model endpoint at http://llm.internal:8000/v1",
    ),
    (
        openai.APITimeoutError(request=REQUEST),
        "the model endpoint at http://llm.internal:8000/v1 did not answer in time",
    ),
    (
        status_error(openai.NotFoundError, 404, code="model_not_found"),
        "the model endpoint does not know model 'gpt-x'",
    ),
    (
        status_error(openai.NotFoundError, 404, message="The model `gpt-x` does not exist"),
        "the model endpoint does not know model 'gpt-x'",
    ),
    (
        status_error(openai.NotFoundError, 404, message="Not Found"),
        "the model endpoint at http://llm.internal:8000/v1 answered HTTP 404 (is the base URL right?)",
    ),
    (
        status_error(openai.RateLimitError, 429, code="rate_limit_exceeded"),
        "the model endpoint is rate-limiting us; try again in a minute",
    ),
    (
        status_error(openai.RateLimitError, 429, code="insufficient_quota"),
        "the model endpoint says the account has no quota left",
    ),
    (
        status_error(openai.InternalServerError, 500, message="upstream\non fire"),
        "HTTP 500: upstream on fire",
    ),
]


@pytest.mark.parametrize(("exc", "expected"), CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_each_failure_reads_as_one_specific_line(exc: openai.APIError, expected: str) -> None:
    assert model_error_text(exc, base_url=BASE, model="gpt-x") == expected


def test_detail_adds_the_status_and_the_endpoint_words_for_the_announce() -> None:
    exc = status_error(openai.RateLimitError, 429, message="slow down please")
    text = model_error_text(exc, base_url=BASE, model="m", detail=True)
    assert text == (
        "the model endpoint is rate-limiting us; try again in a minute (HTTP 429: slow down please)"
    )
    connection = openai.APIConnectionError(request=REQUEST)
    assert "(" not in model_error_text(connection, base_url=BASE, model="m", detail=True)


def test_a_password_in_the_base_url_is_not_shown_and_long_words_are_cut() -> None:
    exc = openai.APIConnectionError(request=REQUEST)
    text = model_error_text(exc, base_url="https://u:s3cret@llm.example/v1", model="m")
    assert text == "cannot reach the model endpoint at https://u:***@llm.example/v1"
    long = status_error(openai.InternalServerError, 502, message="x" * 5000)
    assert len(model_error_text(long, base_url=BASE, model="m")) < 220
