import os
from pathlib import Path

import pytest

from bot.config import Settings, load_settings
from bot.config_check import public_url, redis_url_problem, unknown_keys
from bot.errors import ConfigError
from bot.redis.server import RedisServer


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FANBOT_/OPENAI_ variables; the working directory is empty, so the implicit
    ``./fanbot.toml`` is absent until a test writes it."""
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_env_nesting_and_openai_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_SUBAGENTS__MAX_CONCURRENT", "3")
    monkeypatch.setenv("FANBOT_ADMINS", '["slack:U1"]')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    s = load_settings()
    assert s.subagents.max_concurrent == 3
    assert s.is_admin("slack", "U1") and not s.is_admin("telegram", "U1")
    assert s.openai.api_key is not None and s.openai.api_key.get_secret_value() == "sk-test"
    assert s.openai.base_url == "http://127.0.0.1:9/v1" and s.openai.configured


def test_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_SUBAGENTS__MAX_CONCURRENT", "zero")
    with pytest.raises(ConfigError, match="FANBOT_SUBAGENTS__MAX_CONCURRENT"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("FANBOT_SUBAGENTS__THINKING", "ultra", "FANBOT_SUBAGENTS__THINKING"),
        ("FANBOT_ADMINS", '["nocolon"]', "FANBOT_ADMINS"),
        ("FANBOT_ADMINS", "not json", "FANBOT_ADMINS"),
        ("FANBOT_NOT_A_SETTING", "1", None),
    ],
)
def test_more_bad_values(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, needle: str | None
) -> None:
    monkeypatch.setenv(name, value)
    if needle is None:
        load_settings()  # unknown env names are ignored, as usual for env config
        return
    with pytest.raises(ConfigError, match=needle):
        load_settings()


def test_toml_file_is_read_and_secrets_in_it_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "fanbot.toml"
    path.write_text('[subagents]\nmax_concurrent = 5\n[openai]\nmodel = "m1"\n')
    s = load_settings()
    assert s.subagents.max_concurrent == 5 and s.openai.model == "m1"
    path.write_text('[slack]\nbot_token = "xoxb-secret"\n')
    with pytest.raises(ConfigError, match=r"slack\.bot_token"):
        load_settings()
    path.write_text("not = [valid")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings()


def load_error(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The ConfigError message load_settings raises with ``env`` set (asserted one line)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message and message.strip() == message
    return message


def test_an_explicit_config_file_must_exist_the_implicit_default_need_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_settings().redis_url  # no ./fanbot.toml: fine
    missing = tmp_path / "nope" / "fanbot.toml"
    message = load_error(monkeypatch, FANBOT_CONFIG=str(missing))
    assert message == f"FANBOT_CONFIG names {missing}, which does not exist"
    for no_file in (os.devnull, ""):  # the ways to say "read no file"
        monkeypatch.setenv("FANBOT_CONFIG", no_file)
        assert load_settings().redis_url


def test_unknown_keys_in_the_file_are_named_at_every_level_with_did_you_mean(
    tmp_path: Path,
) -> None:
    (tmp_path / "fanbot.toml").write_text(
        'redis_ur = "redis://h/0"\n'
        "[slack]\nmode = 'http'\nbot_tokn = 'x'\n"
        "[agents.main]\nmodle = 'm'\n"
        "[[subagent_types]]\nname = 'r'\ntols = []\n"
        "[prices.m]\ninput = 1\noutput = 2\nbulk = 3\n"
        "[gateway]\nREQUIRE_MENTION = false\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message and message.startswith("fanbot.toml: unknown key(s) ")
    for named in (
        "redis_ur (did you mean redis_url?)",
        "slack.bot_tokn (did you mean slack.bot_token?)",
        "agents.main.modle (did you mean agents.main.model?)",
        "subagent_types[0].tols (did you mean subagent_types[0].tools?)",
        "prices.m.bulk",
        "gateway.REQUIRE_MENTION (did you mean gateway.require_mention?)",
    ):
        assert named in message, (named, message)
    assert "prices.m.bulk (" not in message  # nothing close: no suggestion


def test_a_bad_value_in_the_file_is_named_as_the_file_says_it(tmp_path: Path) -> None:
    (tmp_path / "fanbot.toml").write_text("[subagents]\nmax_concurrent = 0\n")
    with pytest.raises(ConfigError, match=r"^invalid configuration: subagents\.max_concurrent in"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (
            "FANBOT_SLACK__BOT_TOKN",
            "x",
            "FANBOT_SLACK__BOT_TOKN is not a setting (did you mean FANBOT_SLACK__BOT_TOKEN?)",
        ),
        (
            "FANBOT_SUBAGENTS__MAX_CONCURENT",
            "3",
            "(did you mean FANBOT_SUBAGENTS__MAX_CONCURRENT?)",
        ),
        ("FANBOT_AGENTS__MAIN__MODLE", "m", "(did you mean FANBOT_AGENTS__MAIN__MODEL?)"),
    ],
)
def test_unknown_nested_variables_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    assert expected in load_error(monkeypatch, **{name: value})


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("localhost:6379", "'localhost:6379' has no scheme; write redis://localhost:6379/0"),
        ("redis.internal", "write redis://redis.internal/0"),
        ("/run/redis.sock", "write unix:///run/redis.sock"),
        ("http://h:6379/0", "has scheme 'http'"),
        ("redis://localhost:6379/0", None),
        ("rediss://:pw@cache.example:6380/1", None),
        ("unix:///var/run/redis.sock?db=0", None),
    ],
)
def test_redis_urls(url: str, problem: str | None) -> None:
    found = redis_url_problem(url)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_a_redis_url_without_scheme_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = load_error(monkeypatch, FANBOT_REDIS_URL="localhost:6379")
    assert message == (
        "invalid configuration: FANBOT_REDIS_URL: 'localhost:6379' has no scheme; "
        "write redis://localhost:6379/0"
    )


def test_the_console_private_redis_url_is_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = RedisServer(data_dir=tmp_path / "redis").url  # not started: only its URL
    assert url.startswith("unix://")
    monkeypatch.setenv("FANBOT_REDIS_URL", url)
    assert load_settings().redis_url == url


def test_a_password_in_a_url_is_never_shown() -> None:
    assert public_url("redis://:s3cret@h:6379/0") == "redis://***@h:6379/0"
    assert public_url("rediss://user:s3cret@h/0") == "rediss://user:***@h/0"
    assert public_url("unix:///tmp/r.sock?db=0") == "unix:///tmp/r.sock?db=0"
    problem = redis_url_problem("http://:s3cret@h/0")
    assert problem is not None and "s3cret" not in problem


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FANBOT_SLACK__BOT_TOKEN": "xoxb-1"}, "FANBOT_SLACK__APP_TOKEN (xapp-…) is not"),
        (
            {"FANBOT_SLACK__BOT_TOKEN": "xoxb-1", "FANBOT_SLACK__MODE": "http"},
            "FANBOT_SLACK__SIGNING_SECRET is not: HTTP mode needs both",
        ),
        ({"FANBOT_SLACK__APP_TOKEN": "xapp-1"}, "FANBOT_SLACK__BOT_TOKEN is not"),
    ],
)
def test_slack_needs_its_pair_of_secrets(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], needle: str
) -> None:
    assert needle in load_error(monkeypatch, **env)


@pytest.mark.parametrize(
    "env",
    [
        {"FANBOT_SLACK__BOT_TOKEN": "xoxb-1", "FANBOT_SLACK__APP_TOKEN": "xapp-1"},
        {
            "FANBOT_SLACK__BOT_TOKEN": "xoxb-1",
            "FANBOT_SLACK__MODE": "http",
            "FANBOT_SLACK__SIGNING_SECRET": "s",
        },
    ],
)
def test_slack_with_both_secrets_loads(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().slack.configured


def test_unknown_keys_walks_every_kind_of_section() -> None:
    data = {"agents": {"a": {"x": 1}}, "subagent_types": [{"name": "n", "y": 2}], "z": 3}
    assert unknown_keys(data, Settings) == ["agents.a.x", "subagent_types[0].y", "z"]
