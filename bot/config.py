"""Settings, from the environment (``FANBOT_`` prefix, ``__`` nesting) and an optional TOML file.

The TOML file is ``$FANBOT_CONFIG`` or ``./fanbot.toml``. Secrets (tokens, passwords, keys)
are only read from the environment; a secret found in the file is a configuration error.
``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are honoured when the ``FANBOT_`` names are unset.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bot.errors import ConfigError

THINKING_LEVELS = ("off", "minimal", "low", "medium", "high")
SECRET_NAMES = frozenset(
    {"api_key", "bot_token", "app_token", "signing_secret", "webhook_secret", "password"}
    | {"access_token"}
)


class OpenAISettings(BaseModel):
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    models: list[str] = Field(default_factory=list, description="Known model names.")
    request_timeout: float = Field(60.0, gt=0, le=3600)
    max_retries: int = Field(2, ge=0, le=10)
    max_steps: int = Field(12, ge=1, le=100)
    max_output_tokens: int | None = Field(None, ge=1)
    max_reply_chars: int = Field(
        200_000,
        ge=1_000,
        le=5_000_000,
        description="A streamed reply (or tool-call arguments) is kept up to this; the rest "
        "is read for its usage and dropped, with a note.",
    )

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.api_key)


class Price(BaseModel):
    """USD per one million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class SubagentSettings(BaseModel):
    max_concurrent: int = Field(8, ge=1, le=1000)
    model: str | None = None
    thinking: str | None = None
    run_timeout_seconds: int = Field(600, ge=1, le=86_400)
    archive_after_minutes: float = Field(60, ge=0)
    heartbeat_seconds: float = Field(2.0, gt=0, le=60)
    stale_after_seconds: float = Field(10.0, gt=0, le=600)
    hard_kill_grace_seconds: float = Field(5.0, ge=0, le=600)
    job_grace_seconds: int = Field(
        15, ge=1, le=3600, description="RQ's hard job timeout is the run timeout plus this."
    )
    shutdown_grace_seconds: float = Field(
        20.0, ge=0, le=3600, description="On SIGTERM a worker lets a run finish this long."
    )
    retention_days: float = Field(
        7.0, gt=0, le=3650, description="Archived runs and transcripts are deleted after this."
    )
    max_spawns_per_turn: int = Field(16, ge=1, le=200)
    max_result_chars: int = Field(20_000, ge=100)

    @field_validator("thinking")
    @classmethod
    def _thinking(cls, value: str | None) -> str | None:
        if value is not None and value not in THINKING_LEVELS:
            raise ValueError(f"must be one of {', '.join(THINKING_LEVELS)}")
        return value


class SubagentType(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    system_prompt: str = ""
    tools: list[str] = Field(default_factory=list)
    model: str | None = None


class AgentSettings(BaseModel):
    system_prompt: str = ""
    model: str | None = None
    subagent_model: str | None = None
    subagent_thinking: str | None = None


class ToolPolicy(BaseModel):
    allow: list[str] = Field(default_factory=list, description="Empty means every tool.")
    deny: list[str] = Field(default_factory=list)
    extra: list[str] = Field(
        default_factory=list, description="Plug-in tools as 'module:attribute'."
    )


class HistorySettings(BaseModel):
    max_messages: int = Field(60, ge=2, le=10_000)
    max_message_chars: int = Field(16_000, ge=100)


class GatewaySettings(BaseModel):
    http_host: str = "127.0.0.1"
    http_port: int = Field(8080, ge=0, le=65535)
    progress_edit_seconds: float = Field(3.0, ge=0)
    delivery_attempts: int = Field(8, ge=1, le=100)
    delivery_backoff_seconds: float = Field(1.0, gt=0)
    delivery_backoff_max_seconds: float = Field(60.0, gt=0)
    reclaim_idle_seconds: float = Field(30.0, gt=0)
    alive_ttl_seconds: float = Field(
        6.0, ge=1, le=300, description="A gateway silent this long is presumed dead."
    )
    dedupe_ttl_seconds: int = Field(86_400, ge=60)
    max_inbound_chars: int = Field(
        32_000,
        ge=100,
        le=150_000,
        description="A longer inbound message is cut to this, with a note, before commands "
        "and turns see it.",
    )
    max_outbound_chars: int = Field(
        20_000,
        ge=1_000,
        le=200_000,
        description="A longer turn reply is cut to this, with a note (at most ~6 platform "
        "messages).",
    )
    require_mention: bool = True


class PlatformAccess(BaseModel):
    allow_users: list[str] = Field(default_factory=list, description="Empty means everyone.")
    allow_chats: list[str] = Field(default_factory=list, description="Empty means every chat.")
    continue_threads: bool = Field(
        True, description="In groups, messages in a thread with a session need no mention."
    )


class SlackSettings(PlatformAccess):
    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    mode: Literal["socket", "http"] = "socket"
    http_path: str = Field("/slack/events", pattern=r"^/", description="HTTP Events route.")
    bot_user_id: str | None = Field(None, description="Overrides the auth.test user id.")
    slash_command: str = Field("/subagents", pattern=r"^/", description="Registered command.")
    max_message_chars: int = Field(3_900, ge=100, le=40_000, description="Per posted message.")
    rate_limit_wait_max_seconds: float = Field(
        5.0, ge=0, le=120, description="Wait in-client for a 429 this short, once; else fail."
    )
    socket_ping_interval: float = Field(10.0, gt=0, le=300)
    assistant_status: bool = Field(True, description="typing() via assistant.threads.setStatus.")

    @property
    def configured(self) -> bool:
        return self.bot_token is not None


_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramSettings(PlatformAccess):
    """Telegram: long polling unless ``webhook_url`` is set (then ``webhook_secret`` is required
    and the gateway serves the webhook at the URL's path on its HTTP port)."""

    continue_threads: bool = False
    bot_token: SecretStr | None = None
    api_url: str = "https://api.telegram.org/bot"
    file_url: str = "https://api.telegram.org/file/bot"
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    poll_timeout_seconds: int = Field(30, ge=0, le=50, description="getUpdates long-poll wait.")

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _WEBHOOK_SECRET.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram)")
        return value

    @model_validator(mode="after")
    def _webhook_needs_secret(self) -> TelegramSettings:
        if self.webhook_url and self.webhook_secret is None:
            raise ValueError("webhook_url needs webhook_secret, or anyone could post updates")
        return self

    @property
    def configured(self) -> bool:
        return self.bot_token is not None


class MatrixSettings(PlatformAccess):
    homeserver: str | None = None
    user_id: str | None = None
    password: SecretStr | None = None
    access_token: SecretStr | None = None
    store_path: str | None = None
    device_name: str = "fanbot"
    thread_replies: bool = Field(
        True, description="Answer a timeline mention in a thread rooted at it (else inline)."
    )
    encryption: bool = False
    join_any_invite: bool = Field(
        False,
        description="Join invites from anyone. Off: only from allow_users (empty: nobody).",
    )
    sync_timeout_ms: int = Field(30_000, ge=0, le=120_000)
    max_message_chars: int = Field(8_000, ge=100, le=30_000)

    @property
    def configured(self) -> bool:
        return bool(self.homeserver and self.user_id and (self.password or self.access_token))


class Settings(BaseSettings):
    """Everything fanbot reads at start. See README "Configuration" for each key."""

    model_config = SettingsConfigDict(
        env_prefix="FANBOT_",
        env_nested_delimiter="__",
        extra="forbid",
        nested_model_default_partial_update=True,
    )

    redis_url: str = "redis://localhost:6379/0"
    key_prefix: str = Field("fanbot:", pattern=r"^[A-Za-z0-9_.:-]+$")
    state_dir: Path = Field(default_factory=lambda: _default_state_dir())
    agent_id: str = Field("main", pattern=r"^[A-Za-z0-9_.-]+$")
    turn_timeout_seconds: int = Field(600, ge=10, le=86_400)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    admins: list[str] = Field(default_factory=list)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    prices: dict[str, Price] = Field(default_factory=dict)
    subagents: SubagentSettings = Field(default_factory=SubagentSettings)
    subagent_types: list[SubagentType] = Field(default_factory=list)
    agents: dict[str, AgentSettings] = Field(default_factory=dict)
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    history: HistorySettings = Field(default_factory=HistorySettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    matrix: MatrixSettings = Field(default_factory=MatrixSettings)

    @field_validator("admins")
    @classmethod
    def _admins(cls, value: list[str]) -> list[str]:
        for item in value:
            platform, _, user = item.partition(":")
            if not platform or not user:
                raise ValueError(f"{item!r} is not 'platform:user_id'")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_path())
        return (init_settings, env_settings, toml)

    def agent(self, agent_id: str | None = None) -> AgentSettings:
        return self.agents.get(agent_id or self.agent_id, AgentSettings())

    def is_admin(self, platform: str, user_id: str) -> bool:
        return f"{platform}:{user_id}" in self.admins


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fanbot"


def config_path() -> Path:
    return Path(os.environ.get("FANBOT_CONFIG", "fanbot.toml"))


def _secrets_in(data: Any, path: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    found: list[str] = []
    for key, value in data.items():
        here = f"{path}.{key}" if path else str(key)
        if key in SECRET_NAMES:
            found.append(here)
        found.extend(_secrets_in(value, here))
    return found


def _env_name(loc: tuple[int | str, ...]) -> str:
    return "FANBOT_" + "__".join(str(part).upper() for part in loc)


def load_settings(**overrides: Any) -> Settings:
    """Read and validate settings; raise :class:`ConfigError` naming each bad setting."""
    path = config_path()
    if path.is_file():
        try:
            secrets = _secrets_in(tomllib.loads(path.read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        if secrets:
            raise ConfigError(
                f"{path} sets secrets ({', '.join(secrets)}); put them in the environment"
            )
    try:
        settings = Settings(**overrides)
    except SettingsError as exc:  # e.g. a complex value that is not valid JSON
        raise ConfigError(f"invalid configuration: {exc}") from None
    except ValidationError as exc:
        lines = [f"{_env_name(err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None
    _apply_openai_env(settings)
    return settings


def _apply_openai_env(settings: Settings) -> None:
    if settings.openai.api_key is None and os.environ.get("OPENAI_API_KEY"):
        settings.openai.api_key = SecretStr(os.environ["OPENAI_API_KEY"])
    if settings.openai.base_url is None and os.environ.get("OPENAI_BASE_URL"):
        settings.openai.base_url = os.environ["OPENAI_BASE_URL"]
