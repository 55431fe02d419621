"""``fanbot doctor`` names the common first-hour mistakes, each with its own line.

The real CLI runs in a subprocess against the test Redis and the protocol-level fakes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram
from bot.testing.netutil import free_port

RIGHT_KEY = "sk-right-key"


class KeyedOpenAI(FakeOpenAI):
    """The fake model endpoint, answering 401 to any API key but :data:`RIGHT_KEY` (as a
    real endpoint does)."""

    async def _list_models(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {RIGHT_KEY}":
            body = {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}
            return web.json_response(body, status=401)
        return await super()._list_models(request)


@dataclass
class Report:
    code: int
    stdout: str
    stderr: str

    def line(self, name: str) -> str:
        """The report line of check ``name`` (``<mark> <name>: <detail>``)."""
        found = [ln for ln in self.stdout.splitlines() if ln[5:].startswith(f"{name}: ")]
        assert len(found) == 1, (name, self.stdout)
        return found[0]


async def doctor(tmp_path: Path, **env: str) -> Report:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FANBOT_", "OPENAI_"))}
    full |= {"FANBOT_STATE_DIR": str(tmp_path / "state"), **env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "doctor",
        env=full, cwd=tmp_path, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    report = Report(code=proc.returncode or 0, stdout=out.decode(), stderr=err.decode())
    assert "Traceback" not in report.stdout + report.stderr, report
    return report


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with KeyedOpenAI(models=("gpt-4o-mini",)) as fake:
        yield fake


def base(redis_url: str, model: FakeOpenAI, key: str = RIGHT_KEY) -> dict[str, str]:
    return {
        "FANBOT_REDIS_URL": redis_url,
        "FANBOT_OPENAI__BASE_URL": model.base_url,
        "FANBOT_OPENAI__API_KEY": key,
    }


async def test_a_wrong_api_key_is_named(tmp_path: Path, redis_url: str, model: FakeOpenAI) -> None:
    report = await doctor(tmp_path, **base(redis_url, model, key="sk-wrong"))
    assert report.code == 1
    assert report.line("model") == "BAD  model: the model endpoint refused the API key (HTTP 401)"
    assert "sk-wrong" not in report.stdout
    right = await doctor(tmp_path, **base(redis_url, model))
    assert right.line("model").startswith("ok   model: endpoint lists 1 model(s)")


async def test_an_unreachable_model_endpoint_is_named(tmp_path: Path, redis_url: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    report = await doctor(tmp_path, FANBOT_REDIS_URL=redis_url, FANBOT_OPENAI__BASE_URL=url)
    assert report.line("model") == f"BAD  model: cannot reach the model endpoint at {url}"


async def test_no_platform_is_a_warning_only(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    report = await doctor(tmp_path, **base(redis_url, model))
    assert report.code == 0, report
    line = report.line("platforms")
    assert line.startswith("warn platforms: none configured") and "`fanbot console` none" in line
    assert report.line("config") == "ok   config: no fanbot.toml; environment and defaults only"


async def test_slack_with_one_of_its_two_tokens(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    report = await doctor(tmp_path, **base(redis_url, model), FANBOT_SLACK__BOT_TOKEN="xoxb-1")
    assert report.code == 2 and report.stdout == ""
    [line] = report.stderr.splitlines()
    assert line.startswith("fanbot doctor: FANBOT_SLACK__BOT_TOKEN is set but FANBOT_SLACK__APP")


async def test_a_missing_config_file_and_unknown_keys(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    missing = await doctor(tmp_path, **base(redis_url, model), FANBOT_CONFIG="nope.toml")
    assert missing.code == 2
    assert missing.stderr == "fanbot doctor: FANBOT_CONFIG names nope.toml, which does not exist\n"
    (tmp_path / "fanbot.toml").write_text('[telegram]\napi_ur = "http://x"\n')
    unknown = await doctor(tmp_path, **base(redis_url, model))
    assert unknown.code == 2
    assert unknown.stderr == (
        "fanbot doctor: fanbot.toml: unknown key(s) telegram.api_ur "
        "(did you mean telegram.api_url?)\n"
    )
    (tmp_path / "fanbot.toml").write_text('[telegram]\napi_url = "http://x/bot"\n')
    read = await doctor(tmp_path, **base(redis_url, model))
    assert read.line("config") == f"ok   config: read {tmp_path.resolve() / 'fanbot.toml'}"


async def test_the_matrix_bot_that_joins_nobody(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    matrix = {
        "FANBOT_MATRIX__HOMESERVER": f"http://127.0.0.1:{free_port()}",
        "FANBOT_MATRIX__USER_ID": "@bot:localhost",
        "FANBOT_MATRIX__PASSWORD": "pw-123456",
    }
    report = await doctor(tmp_path, **base(redis_url, model), **matrix)
    line = report.line("matrix invites")
    assert line.startswith("warn matrix invites: the bot accepts no invite")
    assert "FANBOT_MATRIX__ALLOW_USERS" in line and "FANBOT_MATRIX__JOIN_ANY_INVITE" in line
    assert report.line("matrix").startswith("BAD  matrix: cannot reach http://127.0.0.1:")
    for fix in ({"FANBOT_MATRIX__JOIN_ANY_INVITE": "true"},
                {"FANBOT_MATRIX__ALLOW_USERS": '["@ann:localhost"]'}):  # fmt: skip
        fixed = await doctor(tmp_path, **base(redis_url, model), **matrix, **fix)
        assert "matrix invites" not in fixed.stdout


async def test_telegram_privacy_mode_against_the_settings(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        assert tg.me["can_read_all_group_messages"] is False  # the BotFather default
        env = {
            **base(redis_url, model),
            "FANBOT_TELEGRAM__BOT_TOKEN": tg.token,
            "FANBOT_TELEGRAM__API_URL": tg.api_url,
        }
        default = await doctor(tmp_path, **env)
        assert default.line("telegram") == "ok   telegram: bot @fanbot_bot", default
        assert default.code == 0
        no_mention = await doctor(tmp_path, **env, FANBOT_GATEWAY__REQUIRE_MENTION="false")
        line = no_mention.line("telegram")
        assert line.startswith("warn telegram: bot @fanbot_bot; privacy mode is on")
        assert "FANBOT_GATEWAY__REQUIRE_MENTION is off" in line and "/setprivacy" in line
        assert no_mention.code == 0
        topics = await doctor(tmp_path, **env, FANBOT_TELEGRAM__CONTINUE_THREADS="true")
        assert "FANBOT_TELEGRAM__CONTINUE_THREADS is on" in topics.line("telegram")
        tg.me["can_read_all_group_messages"] = True
        off = await doctor(tmp_path, **env, FANBOT_GATEWAY__REQUIRE_MENTION="false")
        assert off.line("telegram") == "ok   telegram: bot @fanbot_bot"
        wrong = await doctor(tmp_path, **{**env, "FANBOT_TELEGRAM__BOT_TOKEN": "1:wrong"})
        assert wrong.line("telegram").startswith("BAD  telegram: ")
        assert "1:wrong" not in wrong.stdout


async def test_an_unreachable_telegram_api(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    api = f"http://127.0.0.1:{free_port()}/bot"
    env = {"FANBOT_TELEGRAM__BOT_TOKEN": "42:secret-token", "FANBOT_TELEGRAM__API_URL": api}
    report = await doctor(tmp_path, **base(redis_url, model), **env)
    assert report.code == 1 and report.stderr == ""
    assert report.line("telegram") == f"BAD  telegram: cannot reach {api} (ClientConnectorError)"
    assert "secret-token" not in report.stdout


def test_doctor_prints_each_agents_effective_tools(redis_url: str) -> None:
    from bot.cli.doctor import check_tools
    from bot.config import Settings

    settings = Settings(
        redis_url=redis_url,
        tools={"allow": ["current_time"]},
        agents={"ops": {"tools": {"deny": ["sessions_spawn"]}}},
    )
    lines = {c.name: (c.mark, c.detail) for c in check_tools(settings)}
    assert lines["tools main"][0] == "ok" and "sessions_spawn" in lines["tools main"][1]
    assert lines["tools ops"][0] == "warn" and "cannot fan out" in lines["tools ops"][1]
    assert lines["tools type general-purpose"] == ("ok", "current_time")


def test_doctor_says_whether_web_search_is_offered() -> None:
    from bot.cli.doctor import check_search
    from bot.config import Settings

    missing = check_search(Settings())
    assert missing.mark == "warn" and "FANBOT_SEARCH__PROVIDER" in missing.detail
    set_up = check_search(Settings(search={"provider": "searxng", "url": "http://s.local:8888"}))
    assert set_up.mark == "ok" and "searxng at http://s.local:8888" in set_up.detail
