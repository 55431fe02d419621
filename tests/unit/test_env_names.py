"""``FANBOT_*`` variables that set nothing are named, with a "did you mean" (issue 30,
"nothing silent"); every name a setting reads, however deep, is not."""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import NOT_SETTINGS_ENV, Settings, env_warnings, platform_problems
from bot.config_check import env_names


@pytest.mark.parametrize(
    "name",
    [
        "FANBOT_REDIS_URL",
        "fanbot_log_level",  # pydantic-settings reads names in any case
        "FANBOT_OPENAI__BASE_URL",
        "FANBOT_MODELS__ENDPOINTS__LOCAL__BASE_URL",  # a free key of a table of sections
        "FANBOT_MODELS__ENDPOINTS__LOCAL",
        "FANBOT_AGENTS__RESEARCH__MODEL",
        "FANBOT_PRICES__GPT_4O__INPUT",
        "FANBOT_MCP__SERVERS__FILES__HEADERS__X_TOKEN",  # a plain table takes any key
        "FANBOT_SUBAGENT_TYPES",
        "FANBOT_SUBAGENTS__MAX_SPAWN_DEPTH",
        *sorted(NOT_SETTINGS_ENV),
    ],
)
def test_names_that_set_something_are_not_warned_about(name: str) -> None:
    assert env_warnings({name: "x", "HOME": "/root", "OPENAI_API_KEY": "k"}) == []


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("FANBOT_REDIS_URLL", "FANBOT_REDIS_URL"),
        ("FANBOT_TELEGRAM_BOT_TOKEN", "FANBOT_TELEGRAM__BOT_TOKEN"),
        ("FANBOT_MATRIX_HOMESERVER", "FANBOT_MATRIX__HOMESERVER"),
        ("FANBOT_REDIS_URL__DB", "FANBOT_REDIS_URL"),  # a plain value has no keys
        ("FANBOT_LOGLEVEL", "FANBOT_LOG_LEVEL"),
    ],
)
def test_a_misspelt_name_gets_the_closest_setting(name: str, meant: str) -> None:
    assert env_warnings({name: "x"}) == [f"{name} is not a setting (did you mean {meant}?)"]


def test_a_name_near_nothing_has_no_suggestion() -> None:
    assert env_warnings({"FANBOT_ZZQX": "1"}) == ["FANBOT_ZZQX is not a setting"]


def test_every_documented_name_is_a_setting() -> None:
    names = env_names(Settings, "FANBOT_")
    assert "FANBOT_SLACK__APP_TOKEN" in names and "FANBOT_OPENAI__API_KEY" in names
    assert env_warnings(dict.fromkeys(names, "x")) == []


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (
            {"matrix": {"homeserver": "https://m.example"}},
            "FANBOT_MATRIX__HOMESERVER is set but FANBOT_MATRIX__USER_ID and "
            "FANBOT_MATRIX__PASSWORD (or FANBOT_MATRIX__ACCESS_TOKEN) are not",
        ),
        (
            {"matrix": {"homeserver": "https://m.example", "user_id": "@b:m", "password": ""}},
            "FANBOT_MATRIX__HOMESERVER and FANBOT_MATRIX__USER_ID are set but "
            "FANBOT_MATRIX__PASSWORD (or FANBOT_MATRIX__ACCESS_TOKEN) is not",
        ),
        (
            {"matrix": {"access_token": "t"}},
            "FANBOT_MATRIX__ACCESS_TOKEN is set but FANBOT_MATRIX__HOMESERVER and "
            "FANBOT_MATRIX__USER_ID are not",
        ),
        (
            {"telegram": {"webhook_url": "https://b.example/tg", "webhook_secret": "s"}},
            "FANBOT_TELEGRAM__WEBHOOK_URL and FANBOT_TELEGRAM__WEBHOOK_SECRET are set but "
            "FANBOT_TELEGRAM__BOT_TOKEN is not",
        ),
    ],
)
def test_a_half_configured_platform_names_what_is_missing(
    values: dict[str, Any], problem: str
) -> None:
    [found] = platform_problems(Settings(**values))
    assert found.startswith(problem + ": "), found


def test_whole_or_untouched_platforms_have_no_problem() -> None:
    matrix = {"homeserver": "https://m.example", "user_id": "@b:m", "access_token": "t"}
    assert platform_problems(Settings(matrix=matrix)) == []
    assert platform_problems(Settings(telegram={"bot_token": "1:a"})) == []
    assert platform_problems(Settings(matrix={"allow_users": ["@a:m"]})) == []
