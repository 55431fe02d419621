"""What a failed model call means, in words a person in the thread can act on.

One pure function, :func:`model_error_text`, used by the main agent's turn (its reply) and
by a subagent run (its announce notes) and by ``fanbot doctor``: a bad key, an unreachable
endpoint, an unknown model, rate limiting, a conversation too long for the model's window or
an overloaded server each get a short, specific sentence instead of the SDK's exception name.
"""

from __future__ import annotations

import openai

from bot.agent.llm import ModelRateLimited
from bot.agent.router import failed_at
from bot.config_check import public_url
from bot.models.errors import Failure, failure_kind

MAX_WORDS = 200
"""An endpoint's own words are cut to this many characters."""


def model_error_text(
    exc: openai.APIError, *, base_url: str, model: str, detail: bool = False
) -> str:
    """A one-line description of ``exc`` for the endpoint at ``base_url`` and ``model``.

    Args:
        exc: What the ``openai`` SDK raised (after its own retries).
        base_url: The endpoint's base URL (shown without a password).
        model: The model the call asked for.
        detail: Add the HTTP status and the endpoint's own words in brackets (for an
            announce's notes, which operators read too).

    A call through :class:`~bot.agent.router.ModelRouter` names the endpoint and model
    that failed last instead (a fallback's), and the models asked before it.
    """
    where = failed_at(exc)
    if where is not None:
        base_url, model = where.base_url, where.model
    text = _meaning(exc, public_url(base_url).rstrip("/"), model)
    if text is None:
        text = _status_text(exc)
    elif detail and isinstance(exc, openai.APIStatusError):
        text += f" ({_status_text(exc)})"
    if where is not None and where.tried:
        text += f" (fallback {where.name}, after {', '.join(where.tried)})"
    return text


def _meaning(exc: openai.APIError, where: str, model: str) -> str | None:
    if isinstance(exc, ModelRateLimited):
        return "the model's rate limit leaves no room before the run's deadline"
    if isinstance(exc, openai.APITimeoutError):
        return f"the model endpoint at {where} did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach the model endpoint at {where}"
    if isinstance(exc, openai.AuthenticationError):
        return "the model endpoint refused the API key"
    if isinstance(exc, openai.NotFoundError):
        return _not_found(exc, where, model)
    if isinstance(exc, openai.APIStatusError):
        kind = failure_kind(exc)
        if kind is Failure.CONTEXT_TOO_LONG:
            return f"the conversation is too long for the context window of model {model!r}"
        if kind is Failure.OVERLOADED:
            return f"the model endpoint at {where} is overloaded; try again in a minute"
        if exc.status_code == 402:
            return "the model endpoint says the account has no credits left"
    if isinstance(exc, openai.RateLimitError):
        if exc.code == "insufficient_quota":
            return "the model endpoint says the account has no quota left"
        return "the model endpoint is rate-limiting us; try again in a minute"
    return None


def _not_found(exc: openai.NotFoundError, where: str, model: str) -> str:
    if exc.code == "model_not_found" or (model and model in str(exc.message)):
        return f"the model endpoint does not know model {model!r}"
    return f"the model endpoint at {where} answered HTTP 404 (is the base URL right?)"


def _status_text(exc: openai.APIError) -> str:
    """``HTTP 500: <the endpoint's words>`` (bounded, one line), or the words alone."""
    status = getattr(exc, "status_code", None)
    said = exc.body.get("message") if isinstance(exc.body, dict) else None
    words = " ".join(str(said or exc.message).split())
    if len(words) > MAX_WORDS:
        words = words[: MAX_WORDS - 1] + "…"
    return f"HTTP {status}: {words}" if status else words or type(exc).__name__
