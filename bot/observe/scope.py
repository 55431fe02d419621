"""What the current job is, for logs, metrics and spans deep inside it (contextvars).

A job entry point (:func:`bot.observe.job_observer.job_scope`) binds a :class:`JobScope`: the run id
and session key that JSON log lines carry, and the callbacks the model client reports to
(:func:`model_call`). Code that runs outside any job (the gateway, a test) sees the empty
scope, whose callbacks are absent: reporting is a no-op there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from bot.observe import tracing
from bot.types import Usage

log = logging.getLogger(__name__)

ModelReport = Callable[[str, Usage, bool], None]
"""``(model, usage, ok)`` after each model call."""


@dataclass(frozen=True, kw_only=True)
class JobScope:
    """The job this code runs for.

    Attributes:
        run_id: The subagent run ("" in a turn).
        session_key: The session whose turn or run this is.
        on_model_call: Told about each model call when it ends.
        on_first_token: Told when a model call streams its first token.
    """

    run_id: str = ""
    session_key: str = ""
    on_model_call: ModelReport | None = None
    on_first_token: Callable[[], None] | None = None


_scope: ContextVar[JobScope] = ContextVar("fanbot_scope", default=JobScope())  # noqa: B039


def current() -> JobScope:
    return _scope.get()


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[JobScope]:
    """Bind the current scope with ``fields`` replaced for the block."""
    scope = dataclasses.replace(current(), **fields)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


@dataclass(kw_only=True)
class ModelCall:
    """One model call being made (see :func:`model_call`)."""

    model: str
    usage: Usage = dataclasses.field(default_factory=Usage)
    started: float = dataclasses.field(default_factory=time.monotonic)

    def watch(self, stream: Any) -> Any:
        """``stream`` wrapped so its first token is reported."""
        return _Watched(stream, _safe(current().on_first_token))


@contextlib.contextmanager
def model_call(model: str) -> Iterator[ModelCall]:
    """Around one chat-completion call: a ``chat <model>`` span, then the report to the
    scope (tokens, cost, outcome). Set ``call.usage`` before the block ends."""
    call = ModelCall(model=model)
    ok = False
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    try:
        with tracing.span(f"chat {model}", attrs) as span:
            yield call
            ok = True
            tracing.set_attributes(
                span,
                {
                    "gen_ai.usage.input_tokens": call.usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": call.usage.completion_tokens,
                },
            )
    finally:
        report = current().on_model_call
        if report is not None:
            _safe(lambda: report(model, call.usage, ok))()


def _safe(callback: Callable[[], None] | None) -> Callable[[], None]:
    """``callback`` that logs instead of raising (observing never breaks the work)."""

    def run() -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception as exc:
            log.debug("observer callback failed: %s", exc)

    return run


class _Watched:
    """A chat-completion stream that calls ``first`` at its first chunk with output."""

    def __init__(self, stream: Any, first: Callable[[], None]) -> None:
        self._stream = stream
        self._first: Callable[[], None] | None = first

    def __enter__(self) -> _Watched:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._stream.__exit__(*exc)

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._stream:
            first = self._first
            if first is not None and any(
                c.delta.content or c.delta.tool_calls for c in chunk.choices or ()
            ):
                self._first = None
                first()
            yield chunk
