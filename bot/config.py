"""Settings, from the environment (``FANBOT_`` prefix, ``__`` nesting) and an optional TOML file.

The TOML file is ``$FANBOT_CONFIG`` or ``./fanbot.toml``. A missing ``./fanbot.toml`` is
fine; a ``FANBOT_CONFIG`` naming a file that does not exist is a configuration error
(``FANBOT_CONFIG=/dev/null`` or empty reads no file). Secrets (tokens, passwords, keys)
are only read from the environment; a secret found in the file is a configuration error,
and so is a key no setting has (at any nesting level, with a "did you mean"), in the file
or in a nested ``FANBOT_`` variable. ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` are
honoured when the ``FANBOT_`` names are unset.

Every :class:`~bot.errors.ConfigError` raised here is one line naming the setting.
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bot.config_check import (
    closest,
    model_at,
    redis_url_problem,
    type_fields,
    unknown_env,
    unknown_keys,
)
from bot.errors import ConfigError

THINKING_LEVELS = ("off", "minimal", "low", "medium", "high")
SECRET_NAMES = frozenset(
    {"api_key", "bot_token", "app_token", "signing_secret", "webhook_secret", "password"}
    | {"access_token"}
    | {"headers", "env"}  # an MCP server's HTTP headers and environment carry its credentials
    | {"token", "admin_token"}  # the ops page's
)


def _thinking_level(value: str | None) -> str | None:
    if value is not None and value not in THINKING_LEVELS:
        raise ValueError(f"must be one of {', '.join(THINKING_LEVELS)}")
    return value


ThinkingLevel = Annotated[str | None, AfterValidator(_thinking_level)]
"""A reasoning effort: one of :data:`THINKING_LEVELS`, or None (the model's default)."""


_HOOK_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([.:][A-Za-z_]\w*)(\.[A-Za-z_]\w*)*")


def _hook_paths(value: list[str]) -> list[str]:
    for path in value:
        if not _HOOK_PATH.fullmatch(path):
            raise ValueError(f"{path!r} is not a dotted path ('package.module:function')")
    return value


HookPaths = Annotated[list[str], AfterValidator(_hook_paths)]
"""Hooks by dotted path, ``pkg.module:function`` or ``pkg.module.function``; imported and
checked when a worker starts (:func:`bot.hooks.check`)."""


class _Section(BaseModel):
    """A settings section: a key it does not have is a mistake, not something to ignore."""

    model_config = ConfigDict(extra="forbid")


ServerKind = Literal[
    "auto",
    "openai",
    "azure",
    "openrouter",
    "litellm",
    "vllm",
    "ollama",
    "llamacpp",
    "lmstudio",
    "gemini",
    "anthropic",
    "deepseek",
    "mistral",
    "groq",
    "generic",
]
"""What serves an endpoint: decides its wire dialect (:mod:`bot.models.dialect`); ``auto``
guesses it from the base URL."""


class OpenAISettings(_Section):
    """One OpenAI-compatible endpoint: ``FANBOT_OPENAI__*`` is the default one, each
    ``[models.endpoints.<name>]`` another (docs/models.md)."""

    base_url: str | None = Field(
        None,
        description="The endpoint's base URL (unset: OpenAI's; OPENAI_BASE_URL also honoured).",
    )
    api_key: SecretStr | None = Field(
        None, description="The endpoint's API key (OPENAI_API_KEY also honoured)."
    )
    kind: ServerKind = Field("auto", description="What serves it (its wire dialect).")
    context_window: int | None = Field(
        None, ge=512, description="Tokens a call may hold (prompt and answer); unset: unknown."
    )
    model: str = Field(
        "gpt-4o-mini",
        description="The model the main agent (and, unless set otherwise, subagents) uses.",
    )
    models: list[str] = Field(default_factory=list, description="Known model names.")
    request_timeout: float = Field(
        60.0, gt=0, le=3600, description="Seconds one model call may take."
    )
    max_retries: int = Field(
        2, ge=0, le=10, description="SDK retries of a call that got a 429 or 5xx."
    )
    max_steps: int = Field(
        12, ge=1, le=100, description="Model calls (tool-loop steps) of one turn or run."
    )
    max_output_tokens: int | None = Field(
        None,
        ge=1,
        description="Sent on every model call (max_completion_tokens or max_tokens, as the server kind takes it); budgets reserve this much output per call (unset: 4096).",
    )
    max_reply_chars: int = Field(
        200_000,
        ge=1_000,
        le=5_000_000,
        description="A streamed reply (or tool-call arguments) is kept up to this; the rest "
        "is read for its usage and dropped, with a note.",
    )
    max_requests_per_minute: int | None = Field(
        None,
        ge=0,
        description="Requests per minute to the model endpoint, shared by every worker through "
        "Redis (0 or unset: no limit).",
    )
    max_tokens_per_minute: int | None = Field(
        None,
        ge=0,
        description="Tokens per minute to the model endpoint (estimated before a call, settled "
        "after), shared by every worker (0 or unset: no limit).",
    )
    limit_window_seconds: float = Field(
        60.0,
        ge=1,
        le=60,
        description="The per-minute limits are kept over this window, scaled to it (120 a "
        "minute over 15 s: 30); shorter than a minute only for benchmarks and tests.",
    )

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.api_key)


class Price(_Section):
    """USD per one million tokens."""

    input: float = Field(ge=0, description="USD per 1M prompt tokens.")
    output: float = Field(ge=0, description="USD per 1M completion tokens.")
    cached_input: float | None = Field(
        None, ge=0, description="Prompt tokens read from the provider's cache (unset: input)."
    )


class ModelEntry(_Section):
    """One model on a named endpoint (``[models.models."<endpoint>/<model>"]``)."""

    context_window: int | None = Field(None, ge=512, description="Overrides the endpoint's.")
    max_output_tokens: int | None = Field(None, ge=1, description="Overrides the endpoint's.")
    fallbacks: list[str] = Field(
        default_factory=list,
        description="Models (``endpoint/model``) asked, in order, when this one's endpoint "
        "is down, overloaded or rate limited past the run's patience.",
    )
    price: Price | None = Field(None, description="USD per 1M tokens (unset: the price table).")


class ModelsSettings(_Section):
    """Named endpoints and the models on them (``FANBOT_MODELS``); a model is addressed as
    ``endpoint/model``; ``default`` is the ``FANBOT_OPENAI__*`` endpoint."""

    endpoints: dict[str, OpenAISettings] = Field(
        default_factory=dict,
        description="More endpoints by name, each with every FANBOT_OPENAI__* setting (docs/models.md).",
    )
    models: dict[str, ModelEntry] = Field(
        default_factory=dict,
        description="Models on the endpoints, by 'endpoint/model': context window, output limit, fallbacks, price.",
    )
    allowed: list[str] = Field(
        default_factory=list,
        description="Models (``endpoint/model``) anyone may switch a thread to with "
        "``/model <name>``; the agent's own model is always allowed, and an admin may pick "
        "any configured model (docs/chat-commands.md).",
    )


class SubagentSettings(_Section):
    max_concurrent: int = Field(
        8,
        ge=1,
        le=1000,
        description="Subagent runs executing at once, shared fairly between sessions.",
    )
    model: str | None = Field(
        None,
        description="Default subagent model (after the spawn's, the type's and the agent's; unset: the main model).",
    )
    thinking: ThinkingLevel = Field(
        None, description="Default reasoning effort of subagent runs (unset: the model's default)."
    )
    run_timeout_seconds: int = Field(
        600,
        ge=1,
        le=86_400,
        description="Soft deadline of a run; RQ's hard limit is this plus job_grace_seconds.",
    )
    archive_after_minutes: float = Field(
        60, ge=0, description="Finished child sessions are archived this long after they end."
    )
    heartbeat_seconds: float = Field(
        1.0, gt=0, le=60, description="How often a running run or turn writes its heartbeat."
    )
    stale_after_seconds: float = Field(
        4.0,
        gt=0,
        le=600,
        description="A run or turn whose heartbeat is older than this is taken for dead (its "
        "host died) and resumed elsewhere.",
    )
    max_resumes: int = Field(
        2,
        ge=0,
        le=20,
        description="Times a run (or turn) whose worker died is resumed; one more death "
        "ends it unknown.",
    )
    hard_kill_grace_seconds: float = Field(
        5.0,
        ge=0,
        le=600,
        description="A stopped run whose job still executes this long after the stop gets its hard stop sent again.",
    )
    job_grace_seconds: int = Field(
        15, ge=1, le=3600, description="RQ's hard job timeout is the run timeout plus this."
    )
    shutdown_grace_seconds: float = Field(
        20.0, ge=0, le=3600, description="On SIGTERM a worker lets a run finish this long."
    )
    retention_days: float = Field(
        7.0, gt=0, le=3650, description="Archived runs and transcripts are deleted after this."
    )
    max_spawns_per_turn: int = Field(
        16, ge=1, le=200, description="sessions_spawn calls one turn may make; more are refused."
    )
    max_result_chars: int = Field(
        20_000, ge=100, description="An announce's result is cut to this, with a note."
    )
    max_run_timeout_seconds: int = Field(
        14_400,
        ge=0,
        le=7 * 86_400,
        description="Upper bound of any run's timeout; runTimeoutSeconds 0 means this. 0: no "
        "upper bound, and runTimeoutSeconds 0 means no deadline at all.",
    )
    announce: Literal["cards", "synthesis", "both"] = Field(
        "both",
        description="cards: a full card per run, no continuation; synthesis: a one-line "
        "card per run and the main agent's continuation; both: full cards and continuation.",
    )
    max_chain: int = Field(
        4, ge=0, le=50, description="Continuation rounds (fan-in turns) per user message."
    )
    max_spawn_depth: int = Field(
        1, ge=1, le=5, description="1: only the main agent spawns; 2+: orchestrator runs nest."
    )
    max_children_per_run: int = Field(
        5, ge=1, le=100, description="Children one orchestrator run may spawn."
    )
    max_concurrent_per_session: int | None = Field(
        None, ge=1, le=1000, description="Optional hard cap of one session's runs at once."
    )
    stall_seconds: float = Field(
        300, gt=0, le=86_400, description="No model token and no tool event this long: stalled."
    )
    stall_tool_seconds: float = Field(
        900, gt=0, le=86_400, description="The stall limit while a tool call is running."
    )
    stall_grace_seconds: float = Field(
        30, ge=0, le=3600, description="A stalled run gets this long before it ends timeout."
    )


class WorkerSettings(_Section):
    """How ``fanbot worker`` runs its jobs (docs/architecture.md, "Worker pools")."""

    pool: Literal["fork", "threads"] = Field(
        "threads",
        description="fork: a process per run (RQ's work horse); threads: runs share "
        "long-lived worker processes, up to `concurrency` each.",
    )
    concurrency: int = Field(
        32, ge=1, le=2000, description="threads pool: runs at once per worker process."
    )
    stop_grace_seconds: float = Field(
        5.0,
        gt=0,
        le=600,
        description="threads pool: a stopped run that has not ended this long after its "
        "stop is fenced; its process takes no more work, drains and is replaced.",
    )
    max_runs: int = Field(
        0, ge=0, description="threads pool: recycle a process after this many runs (0: never)."
    )
    max_memory_mb: int = Field(
        0,
        ge=0,
        description="threads pool: recycle a process whose memory (USS) passes this (0: never).",
    )


_RUNNABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_AGENT_ID = re.compile(r"[A-Za-z0-9_.-]+")  # as Settings.agent_id
_LOOP_KEYS = (
    "system_prompt",
    "tools",
    "model",
    "thinking",
    "output_schema",
    "require_approval",
    "skills",
)


class BudgetSettings(_Section):
    """Spend limits (tokens = prompt + completion as the model reports them; USD at
    ``FANBOT_PRICES`` / the price table). None: no limit."""

    run_tokens: int | None = Field(
        None,
        ge=1,
        description="Default token limit of each run (the least of this, its type's and the spawn's applies).",
    )
    run_usd: float | None = Field(None, gt=0, description="Default USD limit of each run.")
    tree_tokens: int | None = Field(None, ge=1, description="A root run and its descendants.")
    tree_usd: float | None = Field(
        None, gt=0, description="USD limit of a root run and its descendants together."
    )
    thread_daily_tokens: int | None = Field(None, ge=1, description="Per thread per UTC day.")
    thread_daily_usd: float | None = Field(None, gt=0, description="USD per thread per UTC day.")
    user_daily_tokens: int | None = Field(None, ge=1, description="Per user per UTC day.")
    user_daily_usd: float | None = Field(None, gt=0, description="USD per user per UTC day.")
    warn_fraction: float = Field(0.8, gt=0, lt=1, description="Warn at this share of a limit.")
    approve_above_usd: float | None = Field(
        None,
        gt=0,
        description="A spawn whose p90 cost estimate is above this waits for a person's "
        "approval in its thread (None: never; see bot.runs.estimate).",
    )


class SubagentType(_Section):
    """One subagent type: a model-driven one (prompt, tools, model) or a compiled one
    (``runnable``: a Python object that gets ``{"messages": [...]}``)."""

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The type's name, as sessions_spawn and /subagents spawn give it.",
    )
    description: str = Field("", description="What the main agent reads to choose the type.")
    system_prompt: str = Field("", description="Its runs' system prompt.")
    tools: list[str] = Field(default_factory=list, description="Empty means every tool.")
    model: str | None = Field(None, description="Its runs' model (endpoint/model).")
    thinking: ThinkingLevel = Field(None, description="Its runs' reasoning effort.")
    context: Literal["isolated", "fork"] = Field(
        "isolated", description="fork: the run also sees the requester's recent messages."
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema the final answer must match (one correction turn)."
    )
    runnable: str | None = Field(
        None, description="'module:attribute' of a compiled subagent (runs instead of the model)."
    )
    role: Literal["leaf", "orchestrator"] = Field(
        "leaf", description="orchestrator: may spawn children below the depth limit."
    )
    max_tokens: int | None = Field(None, ge=1, description="Token limit of each run of it.")
    max_cost_usd: float | None = Field(None, gt=0, description="USD limit of each run of it.")
    require_approval: bool | list[str] = Field(
        False, description="true: each tool call of its runs waits for a person; or tool patterns."
    )
    resume: bool = Field(
        True,
        description="false: a run whose worker died ends unknown instead of resuming "
        "(a compiled runnable resumes from its beginning).",
    )
    skills: list[Path] = Field(
        default_factory=list,
        description="Directories of skill folders its runs see, besides FANBOT_SKILLS__DIRS "
        "(docs/skills.md).",
    )
    middleware: HookPaths = Field(
        default_factory=list,
        description="Hooks around its model and tool calls, at its end and at its fan-in: "
        "dotted paths of Python callables (docs/hooks.md).",
    )

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        from jsonschema import exceptions, validators  # ~90 ms: only when a schema is set

        try:
            validators.validator_for(value).check_schema(value)
        except exceptions.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(top)"
            raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None
        return value

    @field_validator("runnable")
    @classmethod
    def _runnable(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _RUNNABLE.fullmatch(value):
            raise ValueError(f"{value!r} is not 'module:attribute'")
        module = value.partition(":")[0]
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise ValueError(f"cannot import {module!r}: {exc}") from None
        if found is None:
            raise ValueError(f"cannot import {module!r}: no such module")
        return value

    @model_validator(mode="after")
    def _compiled_alone(self) -> SubagentType:
        if self.runnable is not None:
            given = [k for k in _LOOP_KEYS if k in self.model_fields_set]
            if given:
                raise ValueError(
                    f"type {self.name!r} has a runnable, so {', '.join(given)} cannot be set: "
                    "a compiled type brings its own prompt, tools and model"
                )
        return self


class ToolRule(_Section):
    """One layer of tool policy (names or fnmatch patterns); deny wins."""

    allow: list[str] = Field(default_factory=list, description="Empty means every tool.")
    deny: list[str] = Field(
        default_factory=list,
        description="Tools (names or fnmatch patterns) never offered; deny wins over allow.",
    )


class AgentSettings(_Section):
    system_prompt: str = Field("", description="The agent's system prompt for its main turns.")
    model: str | None = Field(
        None, description="The model of its main turns (unset: FANBOT_OPENAI__MODEL)."
    )
    subagent_model: str | None = Field(
        None, description="Default model of the subagent runs it starts."
    )
    subagent_thinking: str | None = Field(
        None, description="Default reasoning effort of the subagent runs it starts."
    )
    tools: ToolRule = Field(default_factory=ToolRule, description="This agent's main turns.")
    skills: list[Path] = Field(
        default_factory=list,
        description="Directories of skill folders its main turns (and its general-purpose "
        "runs) see, besides FANBOT_SKILLS__DIRS (docs/skills.md).",
    )
    middleware: HookPaths = Field(
        default_factory=list,
        description="Hooks for its turns and for every subagent run it starts: dotted paths "
        "of Python callables (docs/hooks.md).",
    )
    allow_agents: list[str] = Field(
        default_factory=list,
        description="Agents this one may target with sessions_spawn's agentId; empty: only "
        "itself, ['*']: any agent in FANBOT_AGENTS.",
    )

    @field_validator("allow_agents")
    @classmethod
    def _allow_agents(cls, value: list[str]) -> list[str]:
        for item in value:
            if item != "*" and not _AGENT_ID.fullmatch(item):
                raise ValueError(f"{item!r} is not an agent id or '*'")
        return value


class ToolPolicy(_Section):
    allow: list[str] = Field(default_factory=list, description="Empty means every tool.")
    deny: list[str] = Field(
        default_factory=list,
        description="Tools (names or fnmatch patterns) never offered; deny wins over allow.",
    )
    subagents: ToolRule = Field(default_factory=ToolRule, description="Subagent runs only.")
    extra: list[str] = Field(
        default_factory=list, description="Plug-in tools as 'module:attribute'."
    )
    require_approval: list[str] = Field(
        default_factory=list,
        description="Tools (fnmatch) any agent, main or subagent, may call only once approved.",
    )


class ApprovalSettings(_Section):
    timeout_seconds: int = Field(
        3600, ge=1, le=7 * 86_400, description="No decision within this time means deny."
    )


class HistorySettings(_Section):
    max_messages: int = Field(
        60,
        ge=2,
        le=10_000,
        description="Messages a session's history keeps (the model sees them); older ones are trimmed.",
    )
    max_message_chars: int = Field(
        16_000, ge=100, description="One history message is cut to this, with a note."
    )


class SessionsSettings(_Section):
    retention_days: float = Field(
        30.0,
        gt=0,
        le=3650,
        description="A session's history and run index expire this long after its last "
        "activity (each write sets it again).",
    )

    @property
    def ttl_seconds(self) -> int:
        """The sessions' TTL in seconds (see docs/architecture.md, "Bounded growth and
        exposure")."""
        return max(1, int(self.retention_days * 86_400))


class GatewaySettings(_Section):
    http_host: str = Field(
        "127.0.0.1",
        description="Where Slack HTTP events, the Telegram webhook, the ops page and the health endpoints are served.",
    )
    http_port: int = Field(
        8080, ge=0, le=65535, description="The gateway's HTTP port (0: any free port)."
    )
    progress_edit_seconds: float = Field(
        3.0, ge=0, description="Minimum time between edits of a run's status message."
    )
    delivery_attempts: int = Field(
        8,
        ge=1,
        le=100,
        description="Outbox delivery attempts before an entry goes to the dead-letter stream.",
    )
    delivery_backoff_seconds: float = Field(
        1.0, gt=0, description="The first retry's backoff (it doubles)."
    )
    delivery_backoff_max_seconds: float = Field(
        60.0, gt=0, description="The longest backoff between delivery attempts."
    )
    reclaim_idle_seconds: float = Field(
        30.0,
        gt=0,
        description="An outbox entry unacknowledged this long is reclaimed by another gateway.",
    )
    alive_ttl_seconds: float = Field(
        6.0, ge=1, le=300, description="A gateway silent this long is presumed dead."
    )
    dedupe_ttl_seconds: int = Field(
        86_400,
        ge=60,
        description="How long a platform event id is remembered, so a redelivery gets no second turn.",
    )
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
    require_mention: bool = Field(
        True,
        description="In groups, a message starts a turn only when it mentions the bot (or continues a thread); DMs always do.",
    )


class ObserveSettings(_Section):
    http_endpoints: bool = Field(
        True,
        description="Serve /metrics, /healthz and /readyz on the gateway's HTTP port.",
    )
    otlp_endpoint: str = Field(
        "",
        description="OTLP/HTTP base URL for traces (else OTEL_EXPORTER_OTLP_ENDPOINT); "
        "empty: no tracing.",
    )
    service_name: str = Field("fanbot", description="Prefix of the traces' service.name.")
    metrics_token: SecretStr | None = Field(
        None,
        description="When set, /metrics and /readyz need 'Authorization: Bearer <token>' "
        "(/healthz stays open).",
    )
    metrics_host: str = Field(
        "", description="Host of the endpoints' own listener; empty: the gateway's host."
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve /metrics, /healthz, /readyz on this port of their own, not on the "
        "webhook port (0: any free port).",
    )


class PlatformAccess(_Section):
    allow_users: list[str] = Field(default_factory=list, description="Empty means everyone.")
    allow_chats: list[str] = Field(default_factory=list, description="Empty means every chat.")
    continue_threads: bool = Field(
        True, description="In groups, messages in a thread with a session need no mention."
    )


class SlackSettings(PlatformAccess):
    bot_token: SecretStr | None = Field(
        None, description="The bot token (xoxb-…); Slack starts when it is set."
    )
    app_token: SecretStr | None = Field(
        None, description="The app-level token (xapp-…) Socket Mode needs."
    )
    signing_secret: SecretStr | None = Field(None, description="Verifies HTTP mode's requests.")
    api_url: str = Field("https://slack.com/api/", description="Slack's Web API base URL.")
    mode: Literal["socket", "http"] = Field(
        "socket", description="socket: Socket Mode (no public URL); http: Events API over HTTPS."
    )
    http_path: str = Field("/slack/events", pattern=r"^/", description="HTTP Events route.")
    bot_user_id: str | None = Field(None, description="Overrides the auth.test user id.")
    slash_command: str = Field("/subagents", pattern=r"^/", description="Registered command.")
    max_message_chars: int = Field(3_900, ge=100, le=40_000, description="Per posted message.")
    rate_limit_wait_max_seconds: float = Field(
        5.0, ge=0, le=120, description="Wait in-client for a 429 this short, once; else fail."
    )
    socket_ping_interval: float = Field(
        10.0, gt=0, le=300, description="Socket Mode's ping period, in seconds."
    )
    assistant_status: bool = Field(True, description="typing() via assistant.threads.setStatus.")

    @property
    def configured(self) -> bool:
        return self.bot_token is not None


_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramSettings(PlatformAccess):
    """Telegram: long polling unless ``webhook_url`` is set (then ``webhook_secret`` is required
    and the gateway serves the webhook at the URL's path on its HTTP port)."""

    continue_threads: bool = Field(
        False, description="In groups, messages in a topic with a session need no mention."
    )
    bot_token: SecretStr | None = Field(
        None, description="The token from BotFather; Telegram starts when it is set."
    )
    api_url: str = Field("https://api.telegram.org/bot", description="Bot API base URL.")
    file_url: str = Field(
        "https://api.telegram.org/file/bot", description="Bot API file download base URL."
    )
    webhook_url: str | None = Field(
        None, description="Receive updates at this public URL instead of long polling."
    )
    webhook_secret: SecretStr | None = Field(
        None, description="Checks the webhook's requests (required with webhook_url)."
    )
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
    homeserver: str | None = Field(
        None,
        description="The homeserver's URL; Matrix starts when it, user_id and a password or access token are set.",
    )
    user_id: str | None = Field(None, description="The bot's Matrix user id (@bot:example.org).")
    password: SecretStr | None = Field(None, description="Password login (or access_token).")
    access_token: SecretStr | None = Field(None, description="Access-token login (or password).")
    store_path: str | None = Field(
        None,
        description="Keeps the device id, the sync position and, with encryption, the keys: keep it across restarts (unset: <state_dir>/matrix).",
    )
    device_name: str = Field("fanbot", description="Device name of a password login.")
    thread_replies: bool = Field(
        True, description="Answer a timeline mention in a thread rooted at it (else inline)."
    )
    encryption: bool = Field(False, description="Read and write end-to-end encrypted rooms.")
    join_any_invite: bool = Field(
        False,
        description="Join invites from anyone. Off: only from allow_users (empty: nobody).",
    )
    sync_timeout_ms: int = Field(30_000, ge=0, le=120_000, description="/sync long-poll wait.")
    max_message_chars: int = Field(
        8_000, ge=100, le=30_000, description="Characters per posted message."
    )

    @property
    def configured(self) -> bool:
        return bool(self.homeserver and self.user_id and (self.password or self.access_token))


_HOSTNAME = re.compile(r"\.?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?")


class WebSettings(_Section):
    """``web_fetch``: its bounds, and the hosts it may reach although they are not public."""

    max_bytes: int = Field(
        5_000_000, ge=1_000, le=200_000_000, description="A body is read up to this, then cut."
    )
    timeout_seconds: float = Field(
        20.0, gt=0, le=600, description="The whole fetch: every redirect, the body included."
    )
    max_redirects: int = Field(5, ge=0, le=10, description="Redirects one fetch follows.")
    parse_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=600,
        description="threads pool: turning one fetched page or PDF into text (in a helper "
        "process) is cut off after this.",
    )
    max_chars: int = Field(
        100_000, ge=1_000, le=1_000_000, description="The most a call may ask for (max_chars)."
    )
    allow_hosts: list[str] = Field(
        default_factory=list,
        description="Hostnames ('.corp.example' also matches its subdomains), IPs or CIDRs "
        "that may be fetched although private, loopback or link-local.",
    )
    user_agent: str = Field("fanbot-web-fetch/0.1", description="The User-Agent web_fetch sends.")

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                if not _HOSTNAME.fullmatch(item):
                    raise ValueError(f"{item!r} is neither a hostname nor an IP/CIDR") from None
        return value


class SearchSettings(_Section):
    """``web_search``: offered only when a provider is configured."""

    provider: Literal["searxng", "brave", "tavily"] | None = Field(
        None, description="searxng, brave or tavily; unset: no web_search tool."
    )
    url: str | None = Field(
        None, description="SearXNG's base URL (required); for Brave and Tavily, the API base."
    )
    api_key: SecretStr | None = None
    timeout_seconds: float = Field(15.0, gt=0, le=120, description="Seconds one search may take.")
    max_results: int = Field(10, ge=1, le=20, description="The most a call may ask for.")

    @model_validator(mode="after")
    def _complete(self) -> SearchSettings:
        if self.provider == "searxng" and not self.url:
            raise ValueError("provider searxng needs url (the instance's base URL)")
        if self.provider in ("brave", "tavily") and self.api_key is None:
            raise ValueError(f"provider {self.provider} needs api_key (FANBOT_SEARCH__API_KEY)")
        return self

    @property
    def configured(self) -> bool:
        return self.provider is not None


class WorkspaceSettings(_Section):
    """The session workspace (files shared by a main agent and its subagents, in Redis)."""

    max_file_bytes: int = Field(
        1_000_000, ge=1_000, le=100_000_000, description="The largest file a workspace holds."
    )
    max_bytes: int = Field(
        32_000_000,
        ge=10_000,
        le=1_000_000_000,
        description="A session's whole workspace (paths and contents) holds at most this.",
    )
    max_files: int = Field(1_000, ge=1, le=100_000, description="Files per session workspace.")


class SkillsSettings(_Section):
    """Agent Skills: folders with a ``SKILL.md`` the agents load on demand (docs/skills.md)."""

    dirs: list[Path] = Field(
        default_factory=list, description="Directories of skill folders every agent sees."
    )
    max_skill_bytes: int = Field(
        5_000_000, ge=1_000, le=500_000_000, description="One skill's files together, at most."
    )
    max_files: int = Field(200, ge=1, le=10_000, description="Files in one skill, at most.")
    max_body_chars: int = Field(
        50_000, ge=100, le=1_000_000, description="A SKILL.md's instructions, at most."
    )
    max_skills: int = Field(
        100, ge=1, le=1_000, description="Skills one agent or type sees, at most."
    )


class AttachmentSettings(_Section):
    """Files in and out of the thread: what a person posts, what a run writes under out/."""

    max_bytes: int = Field(
        10_000_000, ge=1_000, le=100_000_000, description="Largest file taken from a message."
    )
    max_files: int = Field(5, ge=0, le=50, description="Files taken from one message.")
    max_out_files: int = Field(5, ge=0, le=50, description="Files attached to one announce.")
    max_out_bytes: int = Field(
        20_000_000, ge=0, le=500_000_000, description="Total bytes attached to one announce."
    )


class SandboxSettings(_Section):
    """``execute``: shell commands in a bubblewrap sandbox over a copy of the workspace."""

    mode: Literal["bwrap", "off", "unsafe-host"] = Field(
        "bwrap",
        description="bwrap: sandboxed (the tool is offered only when bwrap works here); off: "
        "no execute tool; unsafe-host: commands run on the worker host WITHOUT isolation.",
    )
    bwrap_path: str = Field("bwrap", min_length=1, description="The bwrap binary (or a name).")
    timeout_seconds: float = Field(60.0, gt=0, le=3600, description="Wall time per command.")
    cpu_seconds: int = Field(30, ge=1, le=3600, description="CPU time per process.")
    memory_mb: int = Field(512, ge=16, le=65_536, description="Address space per process.")
    max_processes: int = Field(64, ge=4, le=4096, description="Processes per command.")
    max_output_bytes: int = Field(
        8_000, ge=1_000, le=10_000_000, description="Each of stdout and stderr is kept to this."
    )
    disk_mb: int = Field(
        256,
        ge=1,
        le=100_000,
        description="Each of /tmp (a tmpfs) and the workspace copy holds at most this.",
    )
    uid: int = Field(
        65534, ge=1, description="The host uid commands run as when the worker runs as root."
    )


_MCP_SERVER_NAME = re.compile(r"(?!.*__)[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


class McpServer(_Section):
    """One MCP server: ``command`` (stdio: a subprocess) or ``url`` (streamable HTTP)."""

    command: list[str] = Field(
        default_factory=list, description="stdio: the program and its arguments."
    )
    env: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="stdio: extra environment variables (the server gets only these plus "
        "HOME, LOGNAME, PATH, SHELL, TERM, USER).",
    )
    url: str | None = Field(None, pattern=r"^https?://", description="streamable HTTP endpoint.")
    headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="HTTP: request headers, e.g. Authorization."
    )
    tools: list[str] = Field(
        default_factory=list, description="The server's tool names to offer; empty: all."
    )
    timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="Bounds listing the tools, and each call."
    )
    start_timeout_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Bounds starting the server (connecting, or the subprocess) and its "
        "initialize handshake.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if bool(self.command) == bool(self.url):
            raise ValueError("set either command (stdio) or url (streamable HTTP)")
        if self.env and not self.command:
            raise ValueError("env is for a command (stdio) server; an HTTP server takes headers")
        if self.headers and not self.url:
            raise ValueError("headers are for a url (HTTP) server; a command server takes env")
        return self


class McpSettings(_Section):
    """MCP servers whose tools the agents get, as ``<server>__<tool>``."""

    servers: dict[str, McpServer] = Field(
        default_factory=dict, description="Server name -> how to reach it."
    )

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in value:
            if not _MCP_SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r}: use 1-32 letters, digits, _ and -, starting with "
                    "a letter or digit, without '__'"
                )
        return value


class OpsSettings(_Section):
    """The ops page (``/ops`` on the gateway's HTTP port): off unless ``token`` is set."""

    token: SecretStr | None = Field(
        None, description="Opens the read-only page (16+ characters); unset: no page (404)."
    )
    admin_token: SecretStr | None = Field(
        None, description="Also allows replaying dead letters; unset: no write action."
    )
    origin: str | None = Field(
        None,
        pattern=r"^https?://[^/]+$",
        description="The page's public origin (scheme://host[:port]) when a proxy rewrites "
        "Host; replays must come from it. Unset: the request's own Host.",
    )
    refresh_seconds: int = Field(15, ge=0, le=3600, description="Page reload; 0: never.")
    recent_minutes: float = Field(
        15, ge=0, le=1440, description="Ended runs stay on the page this long."
    )

    @field_validator("token", "admin_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (e.g. openssl rand -hex 24)")
        return value

    @model_validator(mode="after")
    def _two_tokens(self) -> OpsSettings:
        if self.admin_token is None:
            return self
        if self.token is None:
            raise ValueError("admin_token needs token (FANBOT_OPS__TOKEN) set too")
        if self.admin_token.get_secret_value() == self.token.get_secret_value():
            raise ValueError("admin_token must differ from token")
        return self

    @property
    def enabled(self) -> bool:
        return self.token is not None


class SchedulesSettings(_Section):
    """Recurring runs (``/subagents every``; see :mod:`bot.runs.recurring`)."""

    who: Literal["admins", "anyone"] = Field(
        "admins",
        description="Who may add and remove schedules from chat: admins (default) or anyone "
        "(who then removes only their own).",
    )
    min_interval_seconds: int = Field(
        60, ge=1, le=86_400, description="The shortest interval `/subagents every` accepts."
    )
    late_after_seconds: float = Field(
        120,
        ge=1,
        le=86_400,
        description="A firing this long past its tick says it was late (workers were down).",
    )


class LimitsSettings(_Section):
    """Bounded use per person and thread (docs/architecture.md "Bounded use"); 0 turns a
    limit off. Admins (``FANBOT_ADMINS``) are exempt from all of them."""

    messages_per_minute_per_user: int = Field(
        20,
        ge=0,
        le=10_000,
        description="Messages (turns and commands) one person may send the bot per minute; "
        "the first one over is answered with when to retry, the rest are dropped.",
    )
    messages_per_minute_per_thread: int = Field(
        60, ge=0, le=10_000, description="The same, for everyone in one thread or DM together."
    )
    runs_per_user: int = Field(
        24,
        ge=0,
        le=10_000,
        description="Runs one person may have waiting or running at once (spawned by the "
        "model for them, by /subagents spawn, or by their schedules).",
    )
    runs_per_session: int = Field(
        48, ge=0, le=10_000, description="Runs one thread may have waiting or running at once."
    )
    schedules_per_user: int = Field(
        10, ge=0, le=10_000, description="Schedules one person may have at once."
    )


class Settings(BaseSettings):
    """Everything fanbot reads at start; docs/reference/configuration.md lists each key
    (generated from this model: python -m bot.cli.docs_gen)."""

    model_config = SettingsConfigDict(
        env_prefix="FANBOT_",
        env_nested_delimiter="__",
        extra="forbid",
        nested_model_default_partial_update=True,
    )

    redis_url: str = Field(
        "redis://localhost:6379/0",
        description="The shared state (use AOF and noeviction): redis://, rediss:// (TLS), unix:// or redis+sentinel://.",
    )
    key_prefix: str = Field(
        "fanbot:", pattern=r"^[A-Za-z0-9_.:-]+$", description="Prefix of every Redis key."
    )
    state_dir: Path = Field(
        default_factory=lambda: _default_state_dir(),
        description="The console's Redis data and logs: $XDG_STATE_HOME/fanbot, else ~/.local/state/fanbot.",
    )
    agent_id: str = Field(
        "main",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The main agent's id (session keys agent:<id>:…).",
    )
    turn_timeout_seconds: int = Field(
        600,
        ge=10,
        le=86_400,
        description="RQ's hard limit of one main-agent turn job (and of a fan-in continuation).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of every process."
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="json: one JSON object per line with run_id, session_key and trace_id where known.",
    )
    admins: list[str] = Field(
        default_factory=list,
        description="'platform:user_id' of the people allowed to steer any run and exempt from limits.",
    )
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    prices: dict[str, Price] = Field(
        default_factory=dict,
        description="USD per 1M tokens by model name, for the cost line (unset: the genai-prices table).",
    )
    models: ModelsSettings = Field(default_factory=ModelsSettings)
    subagents: SubagentSettings = Field(default_factory=SubagentSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    subagent_types: list[SubagentType] = Field(
        default_factory=list,
        description="Subagent types the main agent may spawn (see the entries below).",
    )
    agents: dict[str, AgentSettings] = Field(
        default_factory=dict,
        description="Agents by id: their prompt, model, tools, skills and hooks (see the entries below).",
    )
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    history: HistorySettings = Field(default_factory=HistorySettings)
    sessions: SessionsSettings = Field(default_factory=SessionsSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    observe: ObserveSettings = Field(default_factory=ObserveSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    matrix: MatrixSettings = Field(default_factory=MatrixSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    workspace: WorkspaceSettings = Field(default_factory=WorkspaceSettings)
    attachments: AttachmentSettings = Field(default_factory=AttachmentSettings)
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    ops: OpsSettings = Field(default_factory=OpsSettings)
    schedules: SchedulesSettings = Field(default_factory=SchedulesSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        problem = redis_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("subagent_types")
    @classmethod
    def _unique_types(cls, value: list[SubagentType]) -> list[SubagentType]:
        seen: set[str] = set()
        for item in value:
            if item.name in seen:
                raise ValueError(f"subagent type {item.name!r} is defined twice")
            seen.add(item.name)
        return value

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


def config_path() -> Path | None:
    """The TOML file to read: ``$FANBOT_CONFIG`` (empty: none) or ``./fanbot.toml``."""
    named = os.environ.get("FANBOT_CONFIG", "fanbot.toml")
    return Path(named).expanduser() if named else None


def otlp_traces_url(observe: ObserveSettings) -> str:
    """The OTLP/HTTP traces URL to export to, or "" (tracing off): the configured base URL,
    else OpenTelemetry's own ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL) or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the whole URL)."""
    base = observe.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if base:
        return base.rstrip("/") + "/v1/traces"
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")


DEMO_DELAY_ENV = "FANBOT_DEMO_SUBAGENT_DELAY"
FAILPOINTS_ENV = "FANBOT_FAILPOINTS"


def demo_delay(environ: Mapping[str, str] = os.environ) -> float | None:
    """``FANBOT_DEMO_SUBAGENT_DELAY`` in seconds (the console's offline demo model), if set.

    Raises:
        ConfigError: Not a number of seconds from 0 to 3600.
    """
    raw = environ.get(DEMO_DELAY_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise ConfigError(f"{DEMO_DELAY_ENV} must be a number of seconds (0-3600), not {raw!r}")
    return value


ENV_PREFIX = "FANBOT_"
NOT_SETTINGS_ENV = frozenset({"FANBOT_CONFIG", DEMO_DELAY_ENV, FAILPOINTS_ENV})
"""``FANBOT_*`` names fanbot reads that are no setting (see :func:`env_warnings`)."""


def env_warnings(environ: Mapping[str, str] = os.environ) -> list[str]:
    """One line per ``FANBOT_*`` environment variable that sets nothing, with a "did you
    mean" (pydantic-settings ignores them: a typo would be silent). Shown at start-up and by
    ``fanbot doctor``."""
    unknown = unknown_env(environ, Settings, prefix=ENV_PREFIX, known=NOT_SETTINGS_ENV)
    return [
        f"{name} is not a setting" + (f" (did you mean {near}?)" if near else "")
        for name, near in unknown
    ]


def failpoint_spec() -> str:
    """``FANBOT_FAILPOINTS``: fault injection for tests (see :mod:`bot.failpoints`)."""
    return os.environ.get(FAILPOINTS_ENV, "")


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
    """``FANBOT_OPENAI__MODEL``; inside a list setting, its JSON path:
    ``FANBOT_SUBAGENT_TYPES[0].runnable``."""
    index = next((i for i, part in enumerate(loc) if isinstance(part, int)), len(loc))
    name = "FANBOT_" + "__".join(str(part).upper() for part in loc[:index])
    return name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[index:])


def read_config_file() -> tuple[Path | None, dict[str, Any]]:
    """The TOML file's path and contents, checked; ``(None, {})`` when there is none.

    Raises:
        ConfigError: ``FANBOT_CONFIG`` names a missing file; the file cannot be read or
            parsed; it sets a secret or a key no setting has.
    """
    path = config_path()
    if path is None or (not path.exists() and "FANBOT_CONFIG" not in os.environ):
        return None, {}
    if not path.exists():
        raise ConfigError(f"FANBOT_CONFIG names {path}, which does not exist")
    if not path.is_file():  # /dev/null: explicitly no file
        return None, {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {_one_line(str(exc))}") from exc
    if secrets := _secrets_in(data):
        raise ConfigError(
            f"{path} sets secrets ({', '.join(secrets)}); put them in the environment"
        )
    if unknown := unknown_keys(data, Settings):
        raise ConfigError(f"{path}: unknown key(s) {'; '.join(unknown)}")
    return path, data


def load_settings(**overrides: Any) -> Settings:
    """Read and validate settings; raise :class:`ConfigError` naming each bad setting."""
    path, data = read_config_file()
    try:
        settings = Settings(**overrides)
    except SettingsError as exc:  # e.g. a complex value that is not valid JSON
        raise ConfigError(f"invalid configuration: {_settings_error(exc)}") from None
    except ValidationError as exc:
        problems = [_describe(err, path, data) for err in exc.errors()]
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
    _apply_openai_env(settings)
    if problems := platform_problems(settings) + model_problems(settings):
        raise ConfigError("; ".join(problems))
    return settings


def _describe(err: Any, path: Path | None, data: dict[str, Any]) -> str:
    """One validation error as ``<where>: <what>``: the TOML key when the file set it, else
    the environment variable; an unknown key gets a "did you mean"."""
    loc: tuple[int | str, ...] = tuple(err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        section = model_at(Settings, loc)
        near = closest(str(loc[-1]), type_fields(section)) if section is not None else None
        hint = f" (did you mean {_env_name((*loc[:-1], near))}?)" if near else ""
        return f"{_env_name(loc)} is not a setting{hint}"
    if path is not None and _env_name(loc) not in os.environ and _in(data, loc):
        return f"{'.'.join(map(str, loc))} in {path}: {message}"
    return f"{_env_name(loc)}: {message}"


def _settings_error(exc: SettingsError) -> str:
    """pydantic-settings' "error parsing value for field ..." said with the variable's name."""
    found = re.search(r'field "(\w+)" from source "EnvSettingsSource"', str(exc))
    if found is None:
        return _one_line(str(exc))
    name = _env_name((found[1],))
    return (
        f"{name} (or a {name}__… variable) is not valid JSON; list and table settings take "
        """JSON in the environment, e.g. FANBOT_ADMINS='["slack:U123"]'"""
    )


def _in(data: Any, loc: tuple[int | str, ...]) -> bool:
    """Whether the parsed TOML ``data`` has a value at ``loc``."""
    for part in loc:
        in_table = isinstance(data, dict) and part in data
        in_array = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if not (in_table or in_array):
            return False
        data = data[part]
    return True


def _one_line(text: str) -> str:
    return " ".join(text.split())


def platform_problems(settings: Settings) -> list[str]:
    """Platform credentials that are set but cannot work, each naming what is missing: a
    Slack bot token without the app token (Socket Mode) or the signing secret (HTTP mode), or
    the other way round; a Telegram webhook without the bot token; a Matrix homeserver
    without the user id and a password or access token."""
    return (
        _slack_problems(settings.slack)
        + _telegram_problems(settings.telegram)
        + _matrix_problems(settings.matrix)
    )


def _slack_problems(s: SlackSettings) -> list[str]:
    if s.bot_token is None:
        given = [n for n in ("app_token", "signing_secret") if getattr(s, n) is not None]
        if given:
            names = " and ".join(_env_name(("slack", n)) for n in given)
            verb = "is" if len(given) == 1 else "are"
            return [f"{names} {verb} set but FANBOT_SLACK__BOT_TOKEN is not; Slack needs both"]
        return []
    if s.mode == "socket" and s.app_token is None:
        return [
            "FANBOT_SLACK__BOT_TOKEN is set but FANBOT_SLACK__APP_TOKEN (xapp-…) is not: "
            "Socket Mode needs both (or set FANBOT_SLACK__MODE=http and "
            "FANBOT_SLACK__SIGNING_SECRET)"
        ]
    if s.mode == "http" and s.signing_secret is None:
        return [
            "FANBOT_SLACK__BOT_TOKEN is set but FANBOT_SLACK__SIGNING_SECRET is not: "
            "HTTP mode needs both"
        ]
    return []


def _given(value: str | SecretStr | None) -> bool:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return bool(value)


def _set_but(section: str, given: list[str], missing: list[str], why: str) -> list[str]:
    """``FANBOT_X__A is set but FANBOT_X__B is not: <why>`` (no platform is half served)."""
    if not given or not missing:
        return []
    names = " and ".join(_env_name((section, n)) for n in given)
    verb = "is" if len(given) == 1 else "are"
    absent = "is not" if len(missing) == 1 else "are not"
    return [f"{names} {verb} set but {' and '.join(missing)} {absent}: {why}"]


def _telegram_problems(t: TelegramSettings) -> list[str]:
    """A webhook without the bot token: Telegram would serve nothing."""
    given = [n for n in ("webhook_url", "webhook_secret") if _given(getattr(t, n))]
    missing = [] if _given(t.bot_token) else ["FANBOT_TELEGRAM__BOT_TOKEN"]
    return _set_but("telegram", given, missing, "Telegram needs the bot token from @BotFather")


def _matrix_problems(m: MatrixSettings) -> list[str]:
    """Matrix needs the homeserver, the user id and a password or an access token."""
    fields = ("homeserver", "user_id", "password", "access_token")
    given = [n for n in fields if _given(getattr(m, n))]
    missing = [_env_name(("matrix", n)) for n in ("homeserver", "user_id") if n not in given]
    if not _given(m.password) and not _given(m.access_token):
        missing.append("FANBOT_MATRIX__PASSWORD (or FANBOT_MATRIX__ACCESS_TOKEN)")
    why = "Matrix needs the homeserver, the bot's user id and its password or access token"
    return _set_but("matrix", given, missing, why)


def model_problems(settings: Settings) -> list[str]:
    """Model names that cannot work (docs/models.md, "Named endpoints"): one whose first
    part reads as a misspelt endpoint (``locl/qwen3`` beside ``local``), and a fallback
    that names no model its endpoint declares. A first part that is no endpoint at all is a
    model of the default endpoint, whole (``openai/gpt-4o`` on OpenRouter), not an error."""
    declared = {"default": settings.openai, **settings.models.endpoints}
    found: list[str] = []
    for where, name in _model_names(settings):
        first, slash, _ = name.partition("/")
        if slash and first not in declared and settings.models.endpoints:
            near = difflib.get_close_matches(first, list(declared), n=1, cutoff=0.75)
            if near:
                found.append(
                    f"{where} {name!r} names endpoint {first!r}, which is not declared "
                    f"(did you mean {near[0]!r}? endpoints: {', '.join(declared)})"
                )
    for model, entry in settings.models.models.items():
        for fallback in entry.fallbacks:
            problem = _fallback_problem(settings, declared, fallback)
            if problem:
                found.append(f'models.models."{model}".fallbacks: {problem}')
    return found


def _model_names(settings: Settings) -> list[tuple[str, str]]:
    """Every model name the settings give outside the endpoints themselves, with where."""
    names = [("subagents.model", settings.subagents.model)]
    for agent_id, agent in settings.agents.items():
        names += [(f"agents.{agent_id}.model", agent.model)]
        names += [(f"agents.{agent_id}.subagent_model", agent.subagent_model)]
    names += [(f"subagent_types.{t.name}.model", t.model) for t in settings.subagent_types]
    names += [("models.models", key) for key in settings.models.models]
    for key, entry in settings.models.models.items():
        names += [(f'models.models."{key}".fallbacks', f) for f in entry.fallbacks]
    return [(where, name) for where, name in names if name]


def _fallback_problem(
    settings: Settings, declared: Mapping[str, OpenAISettings], fallback: str
) -> str | None:
    """Why ``fallback`` names no declared model (None: it does). On a named endpoint the
    model is its ``model``, one of its ``models`` or has its own ``[models.models]`` entry;
    on the default endpoint the same, checked only when ``openai.models`` lists them."""
    first, slash, rest = fallback.partition("/")
    endpoint, model = (
        (first, rest) if slash and rest and first in declared else ("default", fallback)
    )
    where = declared[endpoint]
    known = {where.model, *where.models}
    entries = settings.models.models
    if model in known or f"{endpoint}/{model}" in entries:
        return None
    if endpoint == "default" and (model in entries or model in settings.prices):
        return None
    if endpoint == "default" and not where.models:
        return None  # the default endpoint lists nothing to check against
    shown = ", ".join(sorted(m for m in known if m))
    return (
        f"{fallback!r} is no model of endpoint {endpoint!r} (it declares {shown}); add it to "
        f"its models or give it a [models.models] entry"
    )


def _apply_openai_env(settings: Settings) -> None:
    if settings.openai.api_key is None and os.environ.get("OPENAI_API_KEY"):
        settings.openai.api_key = SecretStr(os.environ["OPENAI_API_KEY"])
    if settings.openai.base_url is None and os.environ.get("OPENAI_BASE_URL"):
        settings.openai.base_url = os.environ["OPENAI_BASE_URL"]
