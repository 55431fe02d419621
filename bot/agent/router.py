"""The :class:`~bot.models.completion.ChatModel` of a fleet with named endpoints: each call
goes to the endpoint its model names, and to the model's fallbacks when that endpoint is
down, overloaded or rate limited (docs/models.md, "Named endpoints" and "Fallbacks").

``request.model`` is resolved by :func:`bot.models.catalog.resolve` (the one place that
decides what a name means); the endpoint gets the model's wire name. A call that failed with
a :data:`~bot.models.errors.FALLBACK_ON` kind before any text arrived goes to the next of
:func:`~bot.models.catalog.fallbacks`, in order, within what is left of the call's time; a
call that already streamed text, a context too long for the window, or any other failure
is raised as it is. The error raised names the endpoint that failed (:func:`failed_at`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import openai

from bot.agent.llm import OpenAIChatModel
from bot.config import OpenAISettings, Settings
from bot.models import catalog
from bot.models.completion import ChatModel, Completion, CompletionRequest
from bot.models.errors import FALLBACK_ON, Failure, failure_kind
from bot.observe import scope
from bot.store.model_limits import ModelLimits
from bot.supervise import abort
from bot.types import Usage

log = logging.getLogger(__name__)

ClientFactory = Callable[[OpenAISettings], ChatModel]
"""Builds the client of one endpoint (its settings, with the model's output limit)."""

LIST_RETRY_SECONDS = 60.0
"""An endpoint that could not list its models is asked again after this long."""
MIN_ATTEMPT_SECONDS = 1.0
"""A fallback is asked only when at least this much of the call's time is left."""
WORDS = {
    Failure.OVERLOADED: "overloaded",
    Failure.RATE_LIMITED: "rate limited",
    Failure.DOWN: "unreachable",
}
"""How a fallback's reason names what happened to the model before it."""

_FAILED_AT = "fanbot_failed_at"


@dataclass(frozen=True, kw_only=True)
class FailedAt:
    """Where a routed call failed last, kept on the exception it raised.

    Attributes:
        name: The model as fanbot names it (:attr:`~bot.models.catalog.Target.name`).
        model: Its name on the endpoint (what the endpoint's own words name).
        base_url: The endpoint's address.
        tried: The models asked before it, each with what happened
            (``gpt-4o overloaded``); empty when it was the model asked for.
    """

    name: str
    model: str
    base_url: str
    tried: tuple[str, ...] = ()


def failed_at(exc: BaseException) -> FailedAt | None:
    """Where the routed call that raised ``exc`` failed (None: not a routed call's)."""
    found = getattr(exc, _FAILED_AT, None)
    return found if isinstance(found, FailedAt) else None


class ModelRouter:
    """One client per endpoint (built on first use, closed by :meth:`close`), chosen per
    call by the request's model name.

    Args:
        settings: The endpoints and models (``FANBOT_OPENAI__*``, ``FANBOT_MODELS``).
        limits: The fleet-wide limiter shared by every endpoint's client (None: none).
        client: Builds an endpoint's client (tests); default an
            :class:`~bot.agent.llm.OpenAIChatModel` with ``limits``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        limits: ModelLimits | None = None,
        client: ClientFactory | None = None,
    ) -> None:
        self.settings = settings
        self._build = client or (lambda s: OpenAIChatModel(settings=s, limits=limits))
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, int | None], ChatModel] = {}
        self._listed: dict[str, tuple[float, frozenset[str] | None]] = {}

    # --- the ChatModel port ----------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The default endpoint's address."""
        return self.base_url_of("")

    def base_url_of(self, name: str) -> str:
        """The address of the endpoint that serves model ``name``."""
        return self._client(catalog.resolve(self.settings, name)).base_url

    def complete(self, request: CompletionRequest) -> Completion:
        """``request`` answered by its model's endpoint, else by its fallbacks in order;
        :attr:`Completion.answered_by` names the model that answered."""
        targets = [
            catalog.resolve(self.settings, request.model),
            *catalog.fallbacks(self.settings, request.model),
        ]
        started = time.monotonic()
        streamed = [False]
        asked_on_text = request.on_text

        def on_text(count: int) -> None:
            streamed[0] = streamed[0] or count > 0
            if asked_on_text is not None:
                asked_on_text(count)

        tried: list[str] = []
        for index, target in enumerate(targets):
            client = self._client(target)
            timeout, budget = _time_left(request, started)
            attempt = dataclasses.replace(
                request, model=target.model, on_text=on_text, timeout=timeout, budget=budget
            )
            try:
                with _reported_as(target):
                    done = client.complete(attempt)
            except openai.APIError as exc:
                kind = failure_kind(exc)
                more = index + 1 < len(targets) and _time_left_enough(request, started)
                if kind not in FALLBACK_ON or streamed[0] or not more or abort.aborted():
                    where = FailedAt(
                        name=target.name,
                        model=target.model,
                        base_url=client.base_url,
                        tried=tuple(tried),
                    )
                    setattr(exc, _FAILED_AT, where)
                    raise
                log.warning(
                    "model %s %s; asking %s", target.name, WORDS[kind], targets[index + 1].name
                )
                tried.append(f"{target.name} {WORDS[kind]}")
                continue
            return dataclasses.replace(
                done, answered_by=target.name, fallback_reason=", ".join(tried)
            )
        raise AssertionError("unreachable: the last target returns or raises")

    def known_models(self) -> frozenset[str] | None:
        """The default endpoint's listed models, and ``endpoint/model`` for each other
        endpoint's (each asked once; one that cannot list gives its configured models).
        With only the default endpoint: what it lists, None if it cannot say."""
        declared = catalog.endpoints(self.settings)
        if len(declared) == 1:
            return self._listed_by(catalog.DEFAULT_ENDPOINT, declared[catalog.DEFAULT_ENDPOINT])
        names: set[str] = set()
        for endpoint, where in declared.items():
            listed = self._listed_by(endpoint, where)
            models = listed if listed is not None else {m for m in (where.model, *where.models)}
            if endpoint == catalog.DEFAULT_ENDPOINT:
                names |= {m for m in models if m}
            else:
                names |= {f"{endpoint}/{m}" for m in models if m}
        return frozenset(names)

    def warm(self) -> list[ChatModel]:
        """Build the client of every endpoint and configured model now (a worker does it
        before it forks, so its horses inherit them); returns them."""
        names = [f"{e}/{w.model}" for e, w in catalog.endpoints(self.settings).items()]
        names += list(self.settings.models.models)
        return [self._client(catalog.resolve(self.settings, n)) for n in names]

    def close(self) -> None:
        """Close every client built so far."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            close = getattr(client, "close", None)
            if callable(close):
                close()

    # --- inside ----------------------------------------------------------------------

    def _client(self, target: catalog.Target) -> ChatModel:
        """The client of ``target``'s endpoint with the model's output limit."""
        return self._endpoint_client(target.endpoint, target.settings, target.max_output_tokens)

    def _endpoint_client(
        self, endpoint: str, settings: OpenAISettings, limit: int | None
    ) -> ChatModel:
        """``endpoint``'s client whose answers stop at ``limit`` tokens (built once)."""
        key = (endpoint, limit)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                if settings.max_output_tokens != limit:
                    settings = settings.model_copy(update={"max_output_tokens": limit})
                client = self._clients[key] = self._build(settings)
            return client

    def _listed_by(self, endpoint: str, where: OpenAISettings) -> frozenset[str] | None:
        """What ``endpoint`` lists (None: it cannot say), asked again only after a failure
        :data:`LIST_RETRY_SECONDS` old."""
        now = time.monotonic()
        with self._lock:
            cached = self._listed.get(endpoint)
        if cached is not None and (cached[1] is not None or now - cached[0] < LIST_RETRY_SECONDS):
            return cached[1]
        listed = self._endpoint_client(endpoint, where, where.max_output_tokens).known_models()
        with self._lock:
            self._listed[endpoint] = (now, listed)
        return listed


@contextlib.contextmanager
def _reported_as(target: catalog.Target) -> Iterator[None]:
    """The block's model calls reported (metrics, cost) under the model's fanbot name
    (``local/qwen3``), not its name on the endpoint."""
    report = scope.current().on_model_call
    if report is None or target.name == target.model:
        yield
        return

    def renamed(_model: str, usage: Usage, ok: bool) -> None:
        report(target.name, usage, ok)

    with scope.bound(on_model_call=renamed):
        yield


def _time_left(request: CompletionRequest, started: float) -> tuple[float | None, float | None]:
    """The request's ``timeout`` and ``budget`` less the time its earlier attempts took."""
    spent = time.monotonic() - started
    timeout = None if request.timeout is None else max(0.0, request.timeout - spent)
    budget = None if request.budget is None else max(0.0, request.budget - spent)
    return timeout, budget


def _time_left_enough(request: CompletionRequest, started: float) -> bool:
    """Whether another attempt still has :data:`MIN_ATTEMPT_SECONDS` (no limit: always)."""
    return all(v is None or v >= MIN_ATTEMPT_SECONDS for v in _time_left(request, started))
