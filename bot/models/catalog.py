"""Which endpoints and models exist, and what a model name means (pure).

A model is named ``endpoint/model`` anywhere a model is named (agents, subagent types,
``sessions_spawn``'s ``model``, ``/subagents spawn --model``). ``default`` is the
``FANBOT_OPENAI__*`` endpoint; a name whose first part is no declared endpoint is a model on
the default endpoint, whole (``openai/gpt-4o`` on an OpenRouter default stays that model).
This module is the one place that decides it (docs/architecture.md, "Model endpoints").
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import ModelEntry, OpenAISettings, Price, Settings

DEFAULT_ENDPOINT = "default"


@dataclass(frozen=True, kw_only=True)
class Target:
    """A model name resolved to where it is served.

    Attributes:
        endpoint: The endpoint's name (``default`` for ``FANBOT_OPENAI__*``).
        model: The model's name on that endpoint (what goes on the wire).
        settings: The endpoint's settings.
        entry: The model's own settings (empty when it has none).
        name: How fanbot names it (records, cards, prices): ``endpoint/model``, or the bare
            model on the default endpoint (``default/`` kept only when the bare name would
            read as another endpoint's).
    """

    endpoint: str
    model: str
    settings: OpenAISettings
    entry: ModelEntry
    name: str

    @property
    def context_window(self) -> int | None:
        """Tokens a call may hold: the model's, else its endpoint's; None: unknown."""
        return self.entry.context_window or self.settings.context_window

    @property
    def max_output_tokens(self) -> int | None:
        return self.entry.max_output_tokens or self.settings.max_output_tokens


def endpoints(settings: Settings) -> dict[str, OpenAISettings]:
    """Every endpoint by name, ``default`` first."""
    return {DEFAULT_ENDPOINT: settings.openai, **settings.models.endpoints}


def resolve(settings: Settings, name: str) -> Target:
    """Where ``name`` is served (an empty name: the default endpoint's model)."""
    declared = endpoints(settings)
    first, slash, rest = name.partition("/")
    if slash and rest and first in declared:
        endpoint, model = first, rest
    else:
        endpoint, model = DEFAULT_ENDPOINT, name or settings.openai.model
    where = declared[endpoint]
    model = model or where.model
    entry = settings.models.models.get(f"{endpoint}/{model}")
    if entry is None and endpoint == DEFAULT_ENDPOINT:
        entry = settings.models.models.get(model)
    if endpoint != DEFAULT_ENDPOINT:
        shown = f"{endpoint}/{model}"
    else:
        clash = model.partition("/")[0] in declared and "/" in model
        shown = f"{DEFAULT_ENDPOINT}/{model}" if clash else model
    return Target(
        endpoint=endpoint, model=model, settings=where, entry=entry or ModelEntry(), name=shown
    )


def qualified(settings: Settings, name: str) -> str:
    """``name`` as fanbot names it (:attr:`Target.name`; pure)."""
    return resolve(settings, name).name


def fallbacks(settings: Settings, name: str) -> list[Target]:
    """The models to ask, in order, when ``name``'s endpoint cannot answer (not itself)."""
    first = resolve(settings, name)
    seen = {first.name}
    found = []
    for other in first.entry.fallbacks:
        target = resolve(settings, other)
        if target.name not in seen:
            seen.add(target.name)
            found.append(target)
    return found


def price(settings: Settings, name: str) -> Price | None:
    """The configured price of ``name``: its model entry's, else ``FANBOT_PRICES`` under its
    whole name or its name on the endpoint; None: ask the price table."""
    target = resolve(settings, name)
    if target.entry.price is not None:
        return target.entry.price
    for key in (name, target.name, target.model):
        if key in settings.prices:
            return settings.prices[key]
    return None


def configured_models(settings: Settings) -> set[str]:
    """Every model the settings name, as :attr:`Target.name`."""
    names = {settings.openai.model, *settings.openai.models, *settings.prices}
    for endpoint, where in settings.models.endpoints.items():
        names |= {f"{endpoint}/{m}" for m in (where.model, *where.models)}
    names |= set(settings.models.models)
    for entry in settings.models.models.values():
        names |= set(entry.fallbacks)
    return {qualified(settings, n) for n in names if n}


def main_model(settings: Settings, agent_id: str | None, thread_model: str | None) -> str:
    """The model of a main-agent turn: the thread's own (``/model``), else its agent's,
    else the default endpoint's (pure)."""
    return thread_model or settings.agent(agent_id).model or settings.openai.model


def allowed_models(settings: Settings, agent_id: str | None) -> list[str]:
    """The models anyone may switch a thread of ``agent_id`` to (``FANBOT_MODELS__ALLOWED``
    and the agent's own), as :attr:`Target.name`, in order, each once (pure)."""
    names = [main_model(settings, agent_id, None), *settings.models.allowed]
    return list(dict.fromkeys(qualified(settings, n) for n in names if n))
