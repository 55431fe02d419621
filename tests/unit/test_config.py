from pathlib import Path

import pytest

from bot.config import load_settings
from bot.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FANBOT_CONFIG", str(tmp_path / "fanbot.toml"))


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
        ("FANBOT_ADMINS", "not json", "admins"),
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
