"""What each server's failure bodies mean (``failure_kind``) and what a person reads."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

from bot.agent.llm import ModelRateLimited
from bot.agent.model_errors import model_error_text
from bot.models.errors import Failure, failure_kind

REQUEST = httpx2.Request("POST", "http://llm.internal:8000/v1/chat/completions")

CLASSES: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    404: openai.NotFoundError,
    413: openai.APIStatusError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def error(status: int, body: Any) -> openai.APIStatusError:
    """The exception the SDK raises for ``status`` and a JSON ``body`` (as it builds it)."""
    response = httpx2.Response(status, request=REQUEST, json=body)
    inner = body.get("error", body) if isinstance(body, dict) else body
    message = inner.get("message") if isinstance(inner, dict) else None
    cls = CLASSES.get(
        status, openai.InternalServerError if status >= 500 else openai.APIStatusError
    )
    return cls(f"Error code: {status} - {message or body}", response=response, body=inner)


TOO_LONG = [
    # OpenAI
    (400, {"error": {"message": "This model's maximum context length is 128000 tokens. However, "
           "your messages resulted in 130401 tokens. Please reduce the length of the messages.",
           "type": "invalid_request_error", "param": "messages",
           "code": "context_length_exceeded"}}),
    # Anthropic
    (400, {"type": "error", "error": {"type": "invalid_request_error",
           "message": "prompt is too long: 208310 tokens > 200000 maximum"}}),
    # Gemini (a list of errors)
    (400, [{"error": {"code": 400, "message": "The input token count (1200000) exceeds the "
            "maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}]),
    # vLLM
    (400, {"object": "error", "message": "This model's maximum context length is 4096 tokens. "
           "However, you requested 5000 tokens (4800 in the messages, 200 in the completion). "
           "Please reduce the length of the messages or completion.",
           "type": "BadRequestError", "param": None, "code": 400}),
    # llama.cpp's server
    (400, {"error": {"code": 400, "message": "the request exceeds the available context size, "
           "try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 9000,
           "n_ctx": 8192}}),
    # Ollama
    (400, {"error": {"message": "input length exceeds the context length", "type": "api_error"}}),
    # LM Studio: ``error`` is a string
    (400, {"error": "The number of tokens to keep from the initial prompt is greater than the "
           "context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger "
           "context length, or provide a shorter input."}),
    # LiteLLM
    (400, {"error": {"message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
           "AnthropicException - prompt is too long", "type": None, "param": None,
           "code": "400"}}),
    # OpenRouter
    (413, {"error": {"message": "Request entity too large", "code": 413}}),
    (400, {"error": {"code": 400, "message": "This endpoint's maximum context length is 32768 "
           "tokens. However, you requested about 40000 tokens."}}),
    # DeepSeek
    (400, {"error": {"message": "This model's maximum context length is 65536 tokens. However, "
           "you requested 70000 tokens.", "type": "invalid_request_error"}}),
    # Groq: a request bigger than the whole per-minute budget
    (413, {"error": {"message": "Request too large for model `llama-3.1-8b-instant` on tokens "
           "per minute (TPM): Limit 6000, Requested 9000", "type": "tokens",
           "code": "rate_limit_exceeded"}}),
    (429, {"error": {"message": "Request too large for gpt-4o on tokens per min (TPM): Limit "
           "30000, Requested 50000.", "type": "tokens", "code": "rate_limit_exceeded"}}),
]  # fmt: skip

OVERLOADED = [
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    (503, [{"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE"}}]),
    (503, {"error": {"message": "server busy, please try again. maximum pending requests "
           "exceeded"}}),
    (503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
    (500, {"error": {"message": "litellm.InternalServerError: AnthropicException - Overloaded"}}),
    (503, {"error": {"message": "Server Overloaded"}}),
    (502, {"error": {"code": 502, "message": "No available provider for this model"}}),
    (429, {"object": "error", "message": "Service tier capacity exceeded for this model.",
           "type": "service_tier_capacity_exceeded", "code": "3505"}),
]  # fmt: skip

RATE_LIMITED = [
    (429, [{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED"}}]),
    (429, {"error": {"message": "Rate limit reached for gpt-4o in organization org-x on requests "
           "per min (RPM): Limit 500, Used 500, Requested 1.", "code": "rate_limit_exceeded"}}),
    (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of request "
           "tokens has exceeded your per-minute rate limit"}}),
]  # fmt: skip

DOWN = [
    (500, {"error": {"message": "upstream on fire"}}),
    (502, "Bad Gateway"),
    (408, {"error": {"code": 408, "message": "Timed out"}}),
]

OTHER = [
    (429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}),
    (402, {"error": {"code": 402, "message": "Insufficient credits. Add more using ..."}}),
    (401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}),
    (
        400,
        {
            "error": {
                "message": "Unsupported parameter: 'max_tokens'",
                "code": "unsupported_parameter",
            }
        },
    ),
    (404, {"error": {"message": "The model `x` does not exist", "code": "model_not_found"}}),
    (400, None),
    (400, "plain text body"),
    (400, []),
]


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [(s, b, Failure.CONTEXT_TOO_LONG) for s, b in TOO_LONG]
    + [(s, b, Failure.OVERLOADED) for s, b in OVERLOADED]
    + [(s, b, Failure.RATE_LIMITED) for s, b in RATE_LIMITED]
    + [(s, b, Failure.DOWN) for s, b in DOWN]
    + [(s, b, Failure.OTHER) for s, b in OTHER],
)
def test_each_servers_body_has_its_meaning(status: int, body: Any, kind: Failure) -> None:
    assert failure_kind(error(status, body)) is kind


def test_not_http_failures() -> None:
    assert failure_kind(openai.APIConnectionError(request=REQUEST)) is Failure.DOWN
    assert failure_kind(openai.APITimeoutError(request=REQUEST)) is Failure.DOWN
    limited = ModelRateLimited("no room", REQUEST, body=None)
    assert failure_kind(limited) is Failure.RATE_LIMITED
    assert failure_kind(ValueError("x")) is Failure.OTHER


def sentence(exc: openai.APIError) -> str:
    return model_error_text(exc, base_url="http://llm.internal:8000/v1/", model="qwen3")


@pytest.mark.parametrize(("status", "body"), TOO_LONG)
def test_too_long_reads_as_one_sentence(status: int, body: Any) -> None:
    said = "the conversation is too long for the context window of model 'qwen3'"
    assert sentence(error(status, body)) == said


@pytest.mark.parametrize(("status", "body"), OVERLOADED)
def test_overloaded_reads_as_one_sentence(status: int, body: Any) -> None:
    assert sentence(error(status, body)) == (
        "the model endpoint at http://llm.internal:8000/v1 is overloaded; try again in a minute"
    )


def test_no_credits_reads_as_one_sentence() -> None:
    said = sentence(error(402, {"error": {"code": 402, "message": "Insufficient credits"}}))
    assert said == "the model endpoint says the account has no credits left"
