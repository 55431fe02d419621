"""``/new``, ``/model``, ``/status``, ``/usage`` (docs/chat-commands.md), without Redis: the
registry lists them everywhere, ``/model``'s arguments parse (bad input is an answer, never an
exception), the allowed list resolves names as :mod:`bot.models.catalog` does."""

from __future__ import annotations

import pytest

from bot.commands import default_router, registry
from bot.commands.parse import parse_command
from bot.commands.session_commands import ModelRequest, parse_model
from bot.config import Settings
from bot.models.catalog import allowed_models, main_model

NEW = ("new", "model", "status", "usage")


def test_the_registry_declares_them_with_help_menu_and_matrix_names() -> None:
    assert ("subagents", "stop", "context", *NEW, "help") == registry.NAMES
    assert registry.menu()[3:7] == tuple(
        (c.name, c.menu) for c in registry.COMMANDS if c.name in NEW
    )
    for name in NEW:
        assert f"• `/{name}` — " in registry.HELP_TEXT
        assert f"`/subagents {name}" in registry.USAGE  # Slack reaches them through it
    assert "also `/reset`" in registry.HELP_TEXT
    assert "reset" in registry.MATCHED and "start" not in registry.MATCHED
    assert registry.slack_slash_commands() == ["/subagents"]  # the manifests stay as they are


@pytest.mark.parametrize("text", ["/new", "/reset", "/model", "/status", "/usage"])
def test_the_router_handles_each_name_and_alias(text: str) -> None:
    command = parse_command(text)
    assert command is not None and default_router().handles(command)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/model", ModelRequest()),
        ("/model local/qwen3", ModelRequest(name="local/qwen3")),
        ("/model openai/gpt-4o-mini", ModelRequest(name="openai/gpt-4o-mini")),
        ("/model DEFAULT", ModelRequest(back=True)),
        ("/model reset", ModelRequest(back=True)),
        ("/subagents model", ModelRequest()),
        ("/subagents model fake-big", ModelRequest(name="fake-big")),
        ("/model a b", "takes one model name"),
        ("/model `x`", "is not a model name"),
        ("/model -rf", "is not a model name"),
        ("/model " + "m" * 201, "is not a model name"),
        ("/model ü", "is not a model name"),
    ],
)
def test_model_arguments_parse(text: str, parsed: ModelRequest | str) -> None:
    command = parse_command(text)
    assert command is not None
    got = parse_model(command)
    if isinstance(parsed, str):
        assert isinstance(got, str) and parsed in got and "`/model <name>`" in got
    else:
        assert got == parsed


def test_the_allowed_list_is_the_agents_model_and_the_setting_each_once() -> None:
    settings = Settings(
        openai={"model": "fake-model"},  # type: ignore[arg-type]
        models={  # type: ignore[arg-type]
            "endpoints": {"local": {"base_url": "http://127.0.0.1:1/v1", "model": "qwen3"}},
            "allowed": ["local/qwen3", "fake-model", "default/other"],
        },
        agents={"ops": {"model": "local/qwen3"}},  # type: ignore[dict-item]
    )
    assert allowed_models(settings, None) == ["fake-model", "local/qwen3", "other"]
    assert allowed_models(settings, "ops") == ["local/qwen3", "fake-model", "other"]
    assert main_model(settings, "ops", None) == "local/qwen3"
    assert main_model(settings, "ops", "fake-model") == "fake-model"
    assert main_model(settings, None, None) == "fake-model"


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_MODELS__ALLOWED", '["local/qwen3", "gpt-4o"]')
    assert Settings().models.allowed == ["local/qwen3", "gpt-4o"]
