"""Model names wherever a model is named: a spawn's model, the start-up config check, and
how a fallback's answer is shown (docs/models.md, "Named endpoints" and "Fallbacks")."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import Settings, model_problems
from bot.runs.render import render_compact_card, stats_line
from bot.runs.spawn import resolve_model
from bot.steps import Meter
from bot.types import RunRecord, RunStatus, ThreadRef


def fleet(**extra: Any) -> Settings:
    return Settings(
        openai={"base_url": "http://cloud.test/v1", "model": "gpt-4o"},
        models={
            "endpoints": {"local": {"base_url": "http://local.test/v1", "model": "qwen3"}},
            "models": {"gpt-4o": {"fallbacks": ["local/qwen3"]}},
        },
        **extra,
    )


def listing(*names: str) -> Any:
    return lambda: frozenset(names)


def test_a_spawn_may_name_a_model_on_a_named_endpoint() -> None:
    s = fleet()
    assert resolve_model(s, "main", "local/qwen3", listing()) == ("local/qwen3", [])
    assert resolve_model(s, "main", "local/llama", listing("gpt-4o", "local/llama")) == (
        "local/llama",
        [],
    )


def test_a_spawn_on_the_default_endpoint_is_recorded_bare() -> None:
    assert resolve_model(fleet(), "main", "default/gpt-4o", listing()) == ("gpt-4o", [])


def test_an_unknown_model_of_a_named_endpoint_says_what_it_knows() -> None:
    known = listing("gpt-4o", "local/qwen3", "local/llama")
    model, warnings = resolve_model(fleet(), "main", "local/bogus", known)
    assert model == "gpt-4o"
    assert warnings == [
        "unknown model 'local/bogus' (local knows local/llama, local/qwen3); using 'gpt-4o'"
    ]


def test_an_unknown_endpoint_is_said_with_the_endpoints_there_are() -> None:
    model, warnings = resolve_model(fleet(), "main", "nowhere/x", listing("gpt-4o"))
    assert model == "gpt-4o"
    assert warnings == [
        "unknown model 'nowhere/x' (no endpoint 'nowhere'; endpoints: default, local); "
        "using 'gpt-4o'"
    ]


def test_a_default_model_unknown_keeps_its_plain_warning() -> None:
    model, warnings = resolve_model(fleet(), "main", "no-such", listing("gpt-4o"))
    assert (model, warnings) == ("gpt-4o", ["unknown model 'no-such'; using 'gpt-4o'"])


def test_nothing_to_check_against_trusts_the_request() -> None:
    assert resolve_model(fleet(), "main", "local/new", lambda: None) == ("local/new", [])


def test_an_agents_model_on_a_named_endpoint_is_its_runs_default() -> None:
    s = fleet(agents={"main": {"subagent_model": "local/qwen3"}})
    assert resolve_model(s, "main", None, listing()) == ("local/qwen3", [])


def test_a_sound_config_has_no_model_problems() -> None:
    s = fleet(agents={"main": {"model": "local/qwen3"}}, subagents={"model": "openai/gpt-4o"})
    assert model_problems(s) == []


def test_a_misspelt_endpoint_is_a_config_error() -> None:
    s = fleet(agents={"main": {"model": "locl/qwen3"}})
    assert model_problems(s) == [
        "agents.main.model 'locl/qwen3' names endpoint 'locl', which is not declared "
        "(did you mean 'local'? endpoints: default, local)"
    ]


def test_a_fallback_naming_an_unknown_model_is_a_config_error() -> None:
    s = fleet()
    s.models.models["gpt-4o"].fallbacks.append("local/llama")
    assert model_problems(s) == [
        "models.models.\"gpt-4o\".fallbacks: 'local/llama' is no model of endpoint 'local' "
        "(it declares qwen3); add it to its models or give it a [models.models] entry"
    ]


def test_a_fallback_with_its_own_entry_is_known() -> None:
    s = fleet()
    s.models.models["gpt-4o"].fallbacks.append("local/llama")
    s.models.models["local/llama"] = type(s.models.models["gpt-4o"])()
    assert model_problems(s) == []


def test_load_settings_refuses_a_fallback_to_an_unknown_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bot.config import load_settings
    from bot.errors import ConfigError

    monkeypatch.setenv("FANBOT_CONFIG", "")
    monkeypatch.setenv("FANBOT_MODELS__ENDPOINTS__LOCAL__BASE_URL", "http://local.test/v1")
    monkeypatch.setenv("FANBOT_MODELS__MODELS", '{"gpt-4o": {"fallbacks": ["local/nope"]}}')
    with pytest.raises(ConfigError, match="'local/nope' is no model of endpoint 'local'"):
        load_settings()


def record(**values: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        run_id="r" * 32, seq=1, session_key="s", child_session_key="c", session_id="x",
        thread=ThreadRef(platform="console", account="local", chat="c", thread="t"), requester="u",
        agent_id="main", subagent_type="general-purpose", task="t", model="gpt-4o",
        started_at=100.0,
    )  # fmt: skip
    return RunRecord(**(base | values))


def test_the_card_says_which_fallback_answered() -> None:
    answered = record(answered_by="local/qwen3", fallback_reason="gpt-4o overloaded")
    line = stats_line(answered, ended_at=160.0, transcript_ref="t")
    assert "answered by local/qwen3 (gpt-4o overloaded)" in line
    card = render_compact_card(answered, status=RunStatus.SUCCESS, ended_at=160.0)
    assert card.endswith("answered by local/qwen3 (gpt-4o overloaded)")
    assert "answered by" not in stats_line(record(), ended_at=160.0, transcript_ref="t")


def test_the_meter_keeps_the_latest_fallback() -> None:
    meter = Meter()
    meter.answered("gpt-4o", "")
    assert meter.fallback_note == ""
    meter.answered("local/qwen3", "gpt-4o overloaded")
    meter.answered("gpt-4o", "")  # its own model answered the next call: still said
    assert meter.fallback_note == "answered by local/qwen3 (gpt-4o overloaded)"
