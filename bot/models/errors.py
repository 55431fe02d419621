"""What a failed model call means, whatever server said it (pure).

Servers say "the prompt is too long" and "we are overloaded" each their own way (400, 413,
429, 503, 529; an ``error.code``, a ``type`` or only words). :func:`failure_kind` is the one
place that reads them; the router (fallbacks) and the context window (compact and retry)
act on its answer (docs/architecture.md, "Model endpoints").
"""

from __future__ import annotations

import enum

import openai


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

_TOO_LONG_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_TOO_LONG_WORDS = (
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "exceeds the maximum number of tokens",
    "request too large",
    "reduce the length",
)
_OVERLOADED_WORDS = ("overloaded", "capacity", "temporarily unavailable", "try again later")


def failure_kind(exc: BaseException) -> Failure:
    """What ``exc`` (raised by the ``openai`` SDK or :mod:`bot.agent.llm`) means."""
    from bot.agent.llm import ModelRateLimited  # the client module imports this one

    if isinstance(exc, ModelRateLimited):
        return Failure.RATE_LIMITED
    if isinstance(exc, openai.APIConnectionError):  # timeouts too
        return Failure.DOWN
    if not isinstance(exc, openai.APIStatusError):
        return Failure.OTHER
    words = _words(exc)
    code = _code(exc)
    status = exc.status_code
    if status == 413 or code in _TOO_LONG_CODES or any(w in words for w in _TOO_LONG_WORDS):
        return Failure.CONTEXT_TOO_LONG
    if status in (503, 529) or code == "overloaded_error" or "overloaded" in words:
        return Failure.OVERLOADED
    if status == 429:
        if code == "insufficient_quota":
            return Failure.OTHER
        return Failure.RATE_LIMITED
    if status >= 500:
        if any(w in words for w in _OVERLOADED_WORDS):
            return Failure.OVERLOADED
        return Failure.DOWN
    return Failure.OTHER


def _words(exc: openai.APIStatusError) -> str:
    body = exc.body
    said = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        said = str(inner.get("message", "")) if isinstance(inner, dict) else str(inner)
    return f"{said} {exc.message}".lower()


def _code(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("code") or inner.get("type") or "")
    return str(exc.code or "")
