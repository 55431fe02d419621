"""A model name nobody configured is the ``model`` label ``other`` (issue 27).

With no model list, a spawn's requested model is trusted (bot/runs/spawn.py), so any name
reaches the model call: it must not become a Prometheus series of its own. Real Redis; the
model call is reported as the LLM client reports it (``bot.observe.scope.model_call``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from bot.config import Settings
from bot.deps import Deps
from bot.observe import metric_defs as catalog
from bot.observe.export import render
from bot.observe.job_observer import job_scope
from bot.observe.scope import model_call
from bot.types import Usage


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={"model": "m-default"},  # type: ignore[arg-type]
        agents={"main": {"subagent_model": "m-" + "x" * 100}},  # type: ignore[dict-item]
    )
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def _call(model: str) -> None:
    with model_call(model) as call:
        call.usage = Usage(prompt_tokens=2, completion_tokens=3)


def test_unknown_model_names_are_other_and_known_ones_are_capped(deps: Deps) -> None:
    long_known = "m-" + "x" * 100
    with job_scope(deps, queue="turns"):
        _call("m-default")
        for i in range(5):
            _call(f"attacker-model-{i}-" + "y" * 300)
        _call(long_known)
    models = {
        dict(labels)["model"]
        for (name, labels), _ in deps.metrics.read().counters.items()
        if name == "fanbot_model_calls"
    }
    assert models == {"m-default", "other", long_known[: catalog.MAX_MODEL_LABEL_CHARS]}
    text = render(deps).decode()
    assert 'model="other"' in text and "attacker-model" not in text
    assert 'fanbot_model_calls_total{model="other",outcome="ok"} 5.0' in text


def test_label_is_decided_from_settings() -> None:
    settings = Settings(openai={"model": "a", "models": ["b"]})  # type: ignore[arg-type]
    known = catalog.configured_models(settings)
    assert catalog.model_label("a", known) == "a" and catalog.model_label("b", known) == "b"
    assert catalog.model_label("c", known) == catalog.OTHER_MODEL
