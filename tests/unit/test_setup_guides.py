"""The set-up guides (docs/guides/) and the Slack manifests (deploy/slack/) stay true.

- Each manifest validates against a JSON Schema of the subset of Slack's manifest format
  it uses, subscribes to exactly the events :mod:`adapters.slack.convert` handles, and asks
  for exactly the scopes those events and the Web API methods the Slack code calls need
  (methods found in the source, named through slack_sdk, scoped by the table below).
- Every ``FANBOT_*`` name in a guide is a real setting; every ``NAME=value`` line in a
  guide's code blocks loads and lands where it says; every ``fanbot <cmd>`` and repository
  path exists; the command lists match the adapters; quoted messages exist in the code.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
import yaml
from pydantic import BaseModel, SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from adapters.matrix import convert as matrix_convert
from adapters.slack import convert as slack_convert
from adapters.telegram import convert as telegram_convert
from bot.cli import app as cli_app
from bot.cli import doctor
from bot.commands import registry
from bot.config import (
    GatewaySettings,
    MatrixSettings,
    Settings,
    SlackSettings,
    load_settings,
)

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "guides"
SLACK_DIR = ROOT / "deploy" / "slack"
SOCKET_MANIFEST = SLACK_DIR / "manifest.yml"
HTTP_MANIFEST = SLACK_DIR / "manifest-http.yml"
GUIDE_FILES = sorted(GUIDES.glob("*.md"))
SLACK_SOURCES = sorted((ROOT / "adapters" / "slack").glob("*.py"))

# -- Slack's documented scopes (docs.slack.dev/reference/methods/<method>) ------------------
# token "bot": needs every scope listed (fanbot works in all four conversation types);
# token "app": an app-level token's scope; token None: no scope.
METHOD_SCOPES: dict[str, tuple[str | None, frozenset[str]]] = {
    "auth.test": (None, frozenset()),
    "apps.connections.open": ("app", frozenset({"connections:write"})),
    # Message metadata rides on chat.postMessage / chat.update: chat:write covers it.
    "chat.postMessage": ("bot", frozenset({"chat:write"})),
    "chat.update": ("bot", frozenset({"chat:write"})),
    "chat.postEphemeral": ("bot", frozenset({"chat:write"})),
    "chat.delete": ("bot", frozenset({"chat:write"})),
    # Accepts chat:write (changelog 2026-03-05; assistant:write is being retired).
    "assistant.threads.setStatus": ("bot", frozenset({"chat:write"})),
    # include_all_metadata needs no extra scope (metadata.message:read is only for the
    # message_metadata_* events, which fanbot does not subscribe to).
    "conversations.replies": (
        "bot",
        frozenset({"channels:history", "groups:history", "im:history", "mpim:history"}),
    ),
    "conversations.history": (
        "bot",
        frozenset({"channels:history", "groups:history", "im:history", "mpim:history"}),
    ),
    "conversations.info": (
        "bot",
        frozenset({"channels:read", "groups:read", "im:read", "mpim:read"}),
    ),
    "users.info": ("bot", frozenset({"users:read"})),
    # Documented with no scope: any token that can see the message may ask for its link.
    "chat.getPermalink": ("bot", frozenset()),
    "reactions.add": ("bot", frozenset({"reactions:write"})),
    "reactions.remove": ("bot", frozenset({"reactions:write"})),
}
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}
MESSAGE_EVENT_OF_CHANNEL_TYPE = {
    "channel": "message.channels",
    "group": "message.groups",
    "im": "message.im",
    "mpim": "message.mpim",
}
# Event types a bot may subscribe to; convert is probed with each.
CANDIDATE_EVENT_TYPES = (
    "app_mention",
    "message",
    "app_home_opened",
    "app_uninstalled",
    "assistant_thread_started",
    "assistant_thread_context_changed",
    "channel_created",
    "file_shared",
    "link_shared",
    "member_joined_channel",
    "message_metadata_posted",
    "pin_added",
    "reaction_added",
    "team_join",
    "tokens_revoked",
)

# -- the subset of Slack's app manifest format the manifests use ----------------------------
_STR = {"type": "string", "minLength": 1}
_HTTPS = {"type": "string", "pattern": r"^https://[^/\s]+/\S*$"}
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["display_information", "features", "oauth_config", "settings"],
    "properties": {
        "_metadata": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "major_version": {"type": "integer", "enum": [1, 2]},
                "minor_version": {"type": "integer", "minimum": 0},
            },
        },
        "display_information": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 35},
                "description": {"type": "string", "maxLength": 140},
                "long_description": {"type": "string", "minLength": 174, "maxLength": 4000},
                "background_color": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"},
            },
        },
        "features": {
            "type": "object",
            "additionalProperties": False,
            "required": ["bot_user"],
            "properties": {
                "app_home": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "home_tab_enabled": {"type": "boolean"},
                        "messages_tab_enabled": {"type": "boolean"},
                        "messages_tab_read_only_enabled": {"type": "boolean"},
                    },
                },
                "bot_user": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["display_name"],
                    "properties": {
                        "display_name": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 80,
                            "pattern": r"^[a-z0-9._-]+$",
                        },
                        "always_online": {"type": "boolean"},
                    },
                },
                "slash_commands": {
                    "type": "array",
                    "maxItems": 50,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["command", "description"],
                        "properties": {
                            "command": {"type": "string", "pattern": r"^/[a-z0-9_-]{1,31}$"},
                            "url": _HTTPS,
                            "description": {"type": "string", "minLength": 1, "maxLength": 2000},
                            "usage_hint": {"type": "string", "maxLength": 1000},
                            "should_escape": {"type": "boolean"},
                        },
                    },
                },
            },
        },
        "oauth_config": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scopes"],
            "properties": {
                "scopes": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["bot"],
                    "properties": {
                        "bot": {
                            "type": "array",
                            "uniqueItems": True,
                            "minItems": 1,
                            "items": {"type": "string", "pattern": r"^[a-z_.]+:[a-z_.]+$|^[a-z]+$"},
                        }
                    },
                }
            },
        },
        "settings": {
            "type": "object",
            "additionalProperties": False,
            "required": ["event_subscriptions", "interactivity", "socket_mode_enabled"],
            "properties": {
                "event_subscriptions": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["bot_events"],
                    "properties": {
                        "request_url": _HTTPS,
                        "bot_events": {
                            "type": "array",
                            "uniqueItems": True,
                            "minItems": 1,
                            "maxItems": 100,
                            "items": {"type": "string", "pattern": r"^[a-z_]+(\.[a-z_]+)?$"},
                        },
                    },
                },
                "interactivity": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["is_enabled"],
                    "properties": {"is_enabled": {"type": "boolean"}, "request_url": _HTTPS},
                },
                "org_deploy_enabled": {"type": "boolean"},
                "socket_mode_enabled": {"type": "boolean"},
                "token_rotation_enabled": {"type": "boolean"},
            },
        },
    },
}
jsonschema.Draft202012Validator.check_schema(MANIFEST_SCHEMA)


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


def _http_urls(manifest: dict[str, Any]) -> list[str]:
    settings, commands = manifest["settings"], manifest["features"].get("slash_commands", [])
    return [
        *[c["url"] for c in commands if "url" in c],
        *[settings[k]["request_url"] for k in ("event_subscriptions", "interactivity")
          if "request_url" in settings[k]],
    ]  # fmt: skip


# -- what the Slack code calls and handles ---------------------------------------------------


def _web_api_method(attribute: str) -> str | None:
    """The Web API method an ``AsyncWebClient`` attribute calls, per slack_sdk's source."""
    func = getattr(AsyncWebClient, attribute, None)
    if attribute.startswith("_") or not callable(func):
        return None
    try:
        found = re.findall(r'api_call\(\s*"([\w.]+)"', inspect.getsource(func))
    except (OSError, TypeError):
        return None
    return found[0] if len(found) == 1 else None


def slack_methods_called() -> dict[str, set[str]]:
    """Web API method -> files calling it: adapters/slack/*.py, and doctor's HTTP check."""
    called: dict[str, set[str]] = {}
    for path in SLACK_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            method = _web_api_method(node.func.attr)
            if node.func.attr == "api_call" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    method = first.value
            if method:
                called.setdefault(method, set()).add(path.name)
    for method in re.findall(r'"/([a-z]+(?:\.[a-zA-Z]+)+)"', inspect.getsource(doctor.check_slack)):
        called.setdefault(method, set()).add("bot/cli/doctor.py")
    return called


def _probe(event_type: str, channel_type: str = "channel") -> bool:
    """Whether convert turns a message-shaped event of this type into an Inbound."""
    channel = {"channel": "C0PROBE", "im": "D0PROBE"}.get(channel_type, "G0PROBE")
    event = {"type": event_type, "channel": channel, "channel_type": channel_type}
    event |= {"ts": "1700000000.000100", "user": "U0HUMAN", "text": "<@U0BOT> hello"}
    body = {"type": "event_callback", "team_id": "T0PROBE", "event": event}
    me = slack_convert.BotIdentity(user_id="U0BOT", bot_id="B0BOT", team_id="T0PROBE")
    return slack_convert.event_to_inbound(body, me) is not None


def slack_events_handled() -> set[str]:
    """Bot event subscriptions for every event type convert turns into an Inbound."""
    handled = {t for t in CANDIDATE_EVENT_TYPES if _probe(t)}
    assert handled >= {"message", "app_mention"}, handled
    events = handled - {"message"}
    if "message" in handled:
        for channel_type, subscription in MESSAGE_EVENT_OF_CHANNEL_TYPE.items():
            assert _probe("message", channel_type), channel_type
            events.add(subscription)
    return events


def slack_scopes_needed(*, slash_commands: bool) -> tuple[set[str], set[str]]:
    """(bot scopes, app-level token scopes) the code needs."""
    bot_scopes: set[str] = set()
    app_scopes: set[str] = set()
    unknown = {m: files for m, files in slack_methods_called().items() if m not in METHOD_SCOPES}
    assert not unknown, (
        f"the Slack code calls {unknown}: add each method's documented scopes to "
        "METHOD_SCOPES here and to deploy/slack/manifest*.yml"
    )
    for method in slack_methods_called():
        token, scopes = METHOD_SCOPES[method]
        (app_scopes if token == "app" else bot_scopes).update(scopes)
    bot_scopes.update(EVENT_SCOPES[e] for e in slack_events_handled())
    if slash_commands:
        bot_scopes.add("commands")
    return bot_scopes, app_scopes


# -- Slack manifest tests ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name)
def test_manifest_validates_against_the_schema(path: Path) -> None:
    jsonschema.validate(_load(path), MANIFEST_SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_code_scan_finds_the_calls_it_must() -> None:
    called = slack_methods_called()
    for method in ("auth.test", "chat.postMessage", "chat.update", "chat.postEphemeral"):
        assert method in called, (method, called)
    assert "apps.connections.open" in called


@pytest.mark.parametrize("path", [SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name)
def test_manifest_subscribes_to_exactly_the_events_convert_handles(path: Path) -> None:
    events = set(_load(path)["settings"]["event_subscriptions"]["bot_events"])
    assert events == slack_events_handled()


@pytest.mark.parametrize("path", [SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name)
def test_manifest_asks_for_exactly_the_scopes_the_code_needs(path: Path) -> None:
    manifest = _load(path)
    needed, _ = slack_scopes_needed(slash_commands=bool(manifest["features"]["slash_commands"]))
    granted = set(manifest["oauth_config"]["scopes"]["bot"])
    assert granted >= needed, f"missing scopes: {sorted(needed - granted)}"
    assert granted <= needed, f"scopes nothing uses: {sorted(granted - needed)}"


def test_the_app_token_scope_is_in_the_slack_guide() -> None:
    _, app_scopes = slack_scopes_needed(slash_commands=True)
    text = (GUIDES / "slack.md").read_text()
    assert app_scopes == {"connections:write"}
    for scope in app_scopes:
        assert f"`{scope}`" in text


@pytest.mark.parametrize("path", [SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name)
def test_manifest_features_match_the_adapter(path: Path) -> None:
    manifest = _load(path)
    defaults = SlackSettings()
    commands = [c["command"] for c in manifest["features"]["slash_commands"]]
    assert commands == registry.slack_slash_commands() == [defaults.slash_command]
    settings = manifest["settings"]
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["token_rotation_enabled"] is False  # the adapter cannot refresh tokens
    home = manifest["features"]["app_home"]
    assert home["messages_tab_enabled"] and not home["messages_tab_read_only_enabled"]


def test_socket_manifest_is_socket_mode_and_has_no_urls() -> None:
    manifest = _load(SOCKET_MANIFEST)
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert _http_urls(manifest) == []
    assert SlackSettings().mode == "socket"


def test_http_manifest_differs_only_in_mode_and_urls() -> None:
    socket, http = _load(SOCKET_MANIFEST), _load(HTTP_MANIFEST)
    assert http["settings"]["socket_mode_enabled"] is False
    urls = _http_urls(http)
    assert len(urls) == 3 and len(set(urls)) == 1, urls
    assert urls[0].endswith(SlackSettings().http_path)
    for command in http["features"]["slash_commands"]:
        del command["url"]
    for key in ("event_subscriptions", "interactivity"):
        del http["settings"][key]["request_url"]
    http["settings"]["socket_mode_enabled"] = True
    assert http == socket


def test_slack_guide_lists_the_manifest() -> None:
    text = (GUIDES / "slack.md").read_text()
    manifest = _load(SOCKET_MANIFEST)
    for scope in manifest["oauth_config"]["scopes"]["bot"]:
        assert f"`{scope}`" in text, scope
    assert "deploy/slack/manifest.yml" in text and "deploy/slack/manifest-http.yml" in text
    assert f"`POST {SlackSettings().http_path}`" in text


# -- settings named in the guides ------------------------------------------------------------

_NAME = re.compile(r"\bFANBOT_[A-Z0-9_]*[A-Z0-9]\b")
_ASSIGNMENT = re.compile(r"^(?:export\s+)?(FANBOT_[A-Z0-9_]+)=(.*)$")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
NOT_SETTINGS = {"FANBOT_CONFIG"}  # the TOML file's path, read by bot.config itself

REQUIRED_NAMES = {
    "slack.md": {
        "FANBOT_SLACK__BOT_TOKEN", "FANBOT_SLACK__APP_TOKEN", "FANBOT_SLACK__SIGNING_SECRET",
        "FANBOT_SLACK__MODE", "FANBOT_SLACK__HTTP_PATH", "FANBOT_GATEWAY__HTTP_HOST",
        "FANBOT_GATEWAY__HTTP_PORT",
    },
    "telegram.md": {
        "FANBOT_TELEGRAM__BOT_TOKEN", "FANBOT_TELEGRAM__WEBHOOK_URL",
        "FANBOT_TELEGRAM__WEBHOOK_SECRET", "FANBOT_GATEWAY__HTTP_HOST",
        "FANBOT_GATEWAY__HTTP_PORT",
    },
    "matrix.md": {
        "FANBOT_MATRIX__HOMESERVER", "FANBOT_MATRIX__USER_ID", "FANBOT_MATRIX__PASSWORD",
        "FANBOT_MATRIX__ACCESS_TOKEN", "FANBOT_MATRIX__STORE_PATH",
        "FANBOT_MATRIX__JOIN_ANY_INVITE", "FANBOT_MATRIX__ALLOW_USERS",
        "FANBOT_MATRIX__ENCRYPTION",
    },
}  # fmt: skip


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def resolve(name: str) -> list[str]:
    """The attribute path of setting ``name`` (``FANBOT_A__B`` -> ``["a", "b"]``).

    Raises:
        LookupError: No such setting (a misspelt name in a guide is easy to miss).
    """
    parts = name.removeprefix("FANBOT_").lower().split("__")
    model: type[BaseModel] = Settings
    for index, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            raise LookupError(f"{name}: {model.__name__} has no field {part!r}")
        inner = _unwrap(field.annotation)
        last = index == len(parts) - 1
        if last:
            return parts
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            raise LookupError(f"{name}: {part!r} is not a section")
        model = inner
    raise AssertionError("unreachable")


def _value(settings: Settings, path: list[str]) -> Any:
    value: Any = settings
    for part in path:
        value = getattr(value, part)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _unquote(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _matches(value: Any, raw: str) -> bool:
    if isinstance(value, bool):
        return value is (raw.lower() == "true")
    if isinstance(value, list | dict):
        return bool(value == json.loads(raw))
    if isinstance(value, int | float):
        return bool(value == type(value)(raw))
    return str(value) == raw


def test_resolve_rejects_what_is_not_a_setting() -> None:
    assert resolve("FANBOT_SLACK__BOT_TOKEN") == ["slack", "bot_token"]
    assert resolve("FANBOT_REDIS_URL") == ["redis_url"]
    for bad in ("FANBOT_SLACK__BOT", "FANBOT_SLACK_BOT_TOKEN", "FANBOT_REDIS_URL__X"):
        with pytest.raises(LookupError):
            resolve(bad)


def test_there_are_three_guides() -> None:
    assert {p.name for p in GUIDE_FILES} >= set(REQUIRED_NAMES)


@pytest.mark.parametrize("path", GUIDE_FILES, ids=lambda p: p.name)
def test_every_setting_named_in_a_guide_exists(path: Path) -> None:
    text = path.read_text()
    names = set(_NAME.findall(text))
    bad = []
    for name in sorted(names - NOT_SETTINGS):
        try:
            resolve(name)
        except LookupError as exc:
            bad.append(str(exc))
    assert not bad, bad
    assert names >= REQUIRED_NAMES.get(path.name, set())
    # Shorthand like "__APP_TOKEN" would escape the check above: write names out in full.
    assert not re.findall(r"(?<![A-Z0-9_])__[A-Z]", text)


@pytest.mark.parametrize("path", [SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name)
def test_every_setting_named_in_a_manifest_comment_exists(path: Path) -> None:
    for name in set(_NAME.findall(path.read_text())) - NOT_SETTINGS:
        resolve(name)


def _blocks_with_assignments() -> list[tuple[str, list[tuple[str, str]]]]:
    found = []
    for path in GUIDE_FILES:
        for number, block in enumerate(_FENCE.findall(path.read_text()), 1):
            pairs = [
                (m[1], _unquote(m[2]))
                for line in block.splitlines()
                if (m := _ASSIGNMENT.match(line.strip()))
            ]
            if pairs:
                found.append((f"{path.name}#{number}", pairs))
    return found


ASSIGNMENT_BLOCKS = _blocks_with_assignments()


def test_the_guides_have_settings_blocks() -> None:
    assert {name.split("#")[0] for name, _ in ASSIGNMENT_BLOCKS} >= set(REQUIRED_NAMES)


@pytest.mark.parametrize(
    ("block", "pairs"), ASSIGNMENT_BLOCKS, ids=[name for name, _ in ASSIGNMENT_BLOCKS]
)
def test_every_settings_block_in_a_guide_loads(
    block: str, pairs: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FANBOT_CONFIG", os.devnull)  # no TOML file
    for name, raw in pairs:
        monkeypatch.setenv(name, raw)
    settings = load_settings()  # raises ConfigError naming a bad value
    for name, raw in pairs:
        value = _value(settings, resolve(name))
        assert _matches(value, raw), (block, name, value, raw)


# -- commands, paths and messages quoted in the guides ----------------------------------------


@pytest.mark.parametrize("path", GUIDE_FILES, ids=lambda p: p.name)
def test_every_fanbot_command_in_a_guide_exists(path: Path) -> None:
    group = typer.main.get_command(cli_app)
    known = set(group.commands)  # type: ignore[attr-defined]
    used = set(re.findall(r"`fanbot ([a-z][a-z-]*)", path.read_text()))
    assert "doctor" in used
    if path.name in REQUIRED_NAMES:  # a platform guide starts the whole path
        assert {"gateway", "worker"} <= used, used
    assert used <= known, used - known


@pytest.mark.parametrize(
    "path", [*GUIDE_FILES, SOCKET_MANIFEST, HTTP_MANIFEST], ids=lambda p: p.name
)
def test_every_repository_path_in_a_guide_exists(path: Path) -> None:
    text = path.read_text()
    for ref in re.findall(r"\b((?:deploy|bot|adapters|workers|tests)/[\w./-]*\w)", text):
        assert (ROOT / ref).exists(), ref


def test_telegram_command_list_matches_the_adapter() -> None:
    text = (GUIDES / "telegram.md").read_text()
    listed = re.findall(r"^([a-z_]+) - (.+)$", text, re.M)
    assert tuple(listed) == telegram_convert.COMMANDS


def test_matrix_bang_commands_match_the_adapter() -> None:
    text = (GUIDES / "matrix.md").read_text()
    assert set(re.findall(r"`!([a-z]+)", text)) == set(matrix_convert.COMMANDS)


def test_defaults_quoted_in_the_guides_are_the_defaults() -> None:
    gateway = GatewaySettings()
    address = f"`{gateway.http_host}:{gateway.http_port}`"
    for name in ("slack.md", "telegram.md"):
        assert address in (GUIDES / name).read_text(), name
    matrix = (GUIDES / "matrix.md").read_text()
    assert f"device name `{MatrixSettings().device_name}`" in matrix


# (guide, what the guide says, what the code says, the file that says it)
QUOTED = [
    ("slack.md", "Slack refused FANBOT_SLACK__APP_TOKEN", None, "adapters/slack/channel.py"),
    ("slack.md", "adapter slack started", "adapter %s started", "bot/gateway/runtime.py"),
    ("slack.md", "5-minute window", None, "adapters/slack/http.py"),
    ("slack.md", "`bot … in team …`", "bot {body.get('user')} in team", "bot/cli/doctor.py"),
    ("telegram.md", "telegram: @… started (polling)", "telegram: @%s started (%s)",
     "adapters/telegram/channel.py"),
    ("telegram.md", "setMyCommands", "set_my_commands", "adapters/telegram/channel.py"),
    ("telegram.md", "deletes any webhook", "delete_webhook", "adapters/telegram/channel.py"),
    ("telegram.md", "calls `setWebhook`", "set_webhook", "adapters/telegram/channel.py"),
    ("telegram.md", "`bot @…`", "bot @{result.get('username')}", "bot/cli/doctor.py"),
    ("matrix.md", "the homeserver rejected the token", None, "adapters/matrix/login.py"),
    ("matrix.md", "matrix: logged in as", "matrix: logged in as %s", "adapters/matrix/login.py"),
    ("matrix.md", "matrix: ignoring invite … (not in allow_users)",
     "matrix: ignoring invite to %s from %s (not in allow_users)", "adapters/matrix/channel.py"),
    ("matrix.md", "cannot decrypt", "matrix: cannot decrypt event", "adapters/matrix/channel.py"),
    ("matrix.md", "adapter matrix started", "adapter %s started", "bot/gateway/runtime.py"),
    ("matrix.md", "reachable; user", None, "bot/cli/doctor.py"),
    *[(guide, "started 4 worker(s) on", "started %d worker(s) on", "workers/launcher.py")
      for guide in ("slack.md", "telegram.md", "matrix.md")],
    *[(guide, "Started subagent #",
       "Started {run_title(ref, noun='subagent'", "bot/commands/spawn_command.py")
      for guide in ("slack.md", "telegram.md", "matrix.md")],
    *[(guide, "Status: success", "Status: {status.value}", "bot/runs/render.py")
      for guide in ("slack.md", "telegram.md", "matrix.md")],
]  # fmt: skip


@pytest.mark.parametrize(("guide", "says", "code", "source"), QUOTED)
def test_messages_quoted_in_the_guides_exist(
    guide: str, says: str, code: str | None, source: str
) -> None:
    flat = " ".join((GUIDES / guide).read_text().split())  # lines wrap anywhere
    assert " ".join(says.split()) in flat, (guide, says)
    assert (code or says) in (ROOT / source).read_text(), (source, code or says)
