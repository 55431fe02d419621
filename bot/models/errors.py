"""What a failed model call means, whatever server said it (pure).

Servers say "the prompt is too long" and "we are overloaded" each their own way (400, 413,
429, 503, 529; an ``error.code``, a ``type`` or only words). :func:`failure_kind` is the one
place that reads them; the router (fallbacks) and the context window (compact and retry)
act on its answer (docs/architecture.md, "Model endpoints").
"""

from __future__ import annotations

import enum

import openai


class ModelRateLimited(openai.APIError):
    """The endpoint's shared window (or a 429's pause) leaves no room before the deadline
    (raised by :mod:`bot.agent.llm`, which exports it too)."""


class Failure(enum.StrEnum):
    CONTEXT_TOO_LONG = "context_too_long"
    """The request does not fit the model's window: compact and retry, never fall back."""
    OVERLOADED = "overloaded"
    """The server is busy (529, 503, ``overloaded_error``): another endpoint may answer."""
    RATE_LIMITED = "rate_limited"
    """429 past the run's patience: another endpoint may answer."""
    DOWN = "down"
    """Unreachable, timed out, or a 5xx: another endpoint may answer."""
    OTHER = "other"
    """Anything else (a bad key, an unknown model, a bad request): said as it is."""


FALLBACK_ON = frozenset({Failure.OVERLOADED, Failure.RATE_LIMITED, Failure.DOWN})
"""Failures after which a model's fallbacks are asked."""

_TOO_LONG_CODES = frozenset(
    {
        "context_length_exceeded",  # OpenAI, Azure, Groq
        "string_above_max_length",
        "exceed_context_size_error",  # llama.cpp's server
        "contextwindowexceedederror",  # LiteLLM
    }
)
_TOO_LONG_WORDS = (
    "maximum context length",  # OpenAI, vLLM, DeepSeek, Mistral, OpenRouter
    "context length exceeded",
    "context_length_exceeded",
    "exceeds the context length",
    "exceeds the available context size",  # llama.cpp's server
    "exceeds the context window",
    "context window exceeded",
    "contextwindowexceedederror",  # LiteLLM
    "prompt is too long",  # Anthropic
    "input is too long",
    "input length exceeds",  # Ollama
    "greater than the context length",  # LM Studio (n_keep >= n_ctx)
    "exceeds the maximum number of tokens",  # Gemini
    "too many tokens",
    "reduce the length",
)
_OVERLOADED_CODES = frozenset({"overloaded_error", "unavailable", "unavailable_error"})
_OVERLOADED_WORDS = (
    "overloaded",
    "capacity",
    "temporarily unavailable",
    "try again later",
    "server busy",  # Ollama
    "loading model",  # llama.cpp's server
    "no available provider",  # OpenRouter
)
_NO_QUOTA = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def failure_kind(exc: BaseException) -> Failure:
    """What ``exc`` (raised by the ``openai`` SDK or :mod:`bot.agent.llm`) means."""
    if isinstance(exc, ModelRateLimited):
        return Failure.RATE_LIMITED
    if isinstance(exc, openai.APIConnectionError):  # timeouts too
        return Failure.DOWN
    if not isinstance(exc, openai.APIStatusError):
        return Failure.OTHER
    words = _words(exc)
    codes = _codes(exc)
    status = exc.status_code
    if _too_long(status, codes, words):
        return Failure.CONTEXT_TOO_LONG
    if status == 529 or codes & _OVERLOADED_CODES or "overloaded" in words:
        return Failure.OVERLOADED
    if status == 429:
        if codes & _NO_QUOTA:
            return Failure.OTHER
        if "capacity" in words:  # Mistral: the service tier's capacity is used up
            return Failure.OVERLOADED
        return Failure.RATE_LIMITED  # Gemini's RESOURCE_EXHAUSTED too
    if status == 503:
        return Failure.OVERLOADED  # Gemini's UNAVAILABLE, Ollama's queue full
    if status >= 500:
        if any(w in words for w in _OVERLOADED_WORDS):
            return Failure.OVERLOADED
        return Failure.DOWN
    if status == 408:
        return Failure.DOWN  # OpenRouter: the provider timed out
    return Failure.OTHER  # 402 (OpenRouter: no credits) included: said as it is


def _too_long(status: int, codes: set[str], words: str) -> bool:
    if status == 413 or codes & _TOO_LONG_CODES:
        return True
    if status == 429:  # a request bigger than the whole per-minute budget never fits
        return "request too large" in words
    if status in (503, 529):
        return False
    return any(w in words for w in _TOO_LONG_WORDS)


def _inner(body: object) -> object:
    """The error object of a body: ``{"error": {...}}``, a Gemini list of them, or itself."""
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict):
        inner = body.get("error", body)
        return inner if isinstance(inner, dict) else body
    return body


def _words(exc: openai.APIStatusError) -> str:
    """Every string in the body (provider messages nested in metadata too) and the message."""
    out: list[str] = []

    def walk(value: object, depth: int) -> None:
        if depth > 6 or len(out) > 100:
            return
        if isinstance(value, str):
            out.append(value[:4000])
        elif isinstance(value, dict):
            for v in value.values():
                walk(v, depth + 1)
        elif isinstance(value, list):
            for v in value[:20]:
                walk(v, depth + 1)

    walk(exc.body, 0)
    return f"{' '.join(out)} {exc.message}".lower()


def _codes(exc: openai.APIStatusError) -> set[str]:
    """The body's ``code``, ``type`` and ``status`` (lower-cased), and the SDK's ``code``."""
    inner = _inner(exc.body)
    found = {str(exc.code or "").lower()}
    if isinstance(inner, dict):
        found |= {str(inner.get(k) or "").lower() for k in ("code", "type", "status")}
    return found - {""}
