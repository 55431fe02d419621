"""Finding the hooks ``middleware`` names: imported once per process, checked at start-up."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from bot.config import Settings
from bot.errors import ConfigError

Hook = Callable[[Any], object]
"""A hook: called with an event (:mod:`bot.hooks.events`), returns None or a Veto."""


class HookNotFound(Exception):
    """A dotted path names nothing callable; the message says why."""


@functools.cache
def resolve(path: str) -> Hook:
    """The callable ``path`` names: ``pkg.module:attr`` (``attr`` may be dotted) or
    ``pkg.module.attr``. Imported once per process (a worker's forks inherit it).

    Raises:
        HookNotFound: The module cannot be imported, has no such attribute, or it is not
            callable.
    """
    module_name, attrs = _split(path)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is the same mistake
        raise HookNotFound(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for attr in attrs:
        if not hasattr(found, attr):
            raise HookNotFound(f"{module_name!r} has no attribute {'.'.join(attrs)!r}")
        found = getattr(found, attr)
    if not callable(found):
        raise HookNotFound(f"{path!r} is a {type(found).__name__}, not a callable")
    hook: Hook = found
    return hook


def _split(path: str) -> tuple[str, list[str]]:
    if ":" in path:
        module_name, _, rest = path.partition(":")
        return module_name, rest.split(".")
    module_name, _, attr = path.rpartition(".")
    return module_name, [attr]


def type_paths(settings: Settings, type_name: str | None) -> list[str]:
    """The hooks a subagent type names (a built-in type names none)."""
    if type_name is None:
        return []
    return next((list(t.middleware) for t in settings.subagent_types if t.name == type_name), [])


def paths_for(settings: Settings, agent_id: str, type_name: str | None) -> list[str]:
    """The hooks of an agent's work, in the order they run: the agent's, then the type's
    (``type_name`` None: a main-agent turn). A path named twice runs once."""
    paths = [*settings.agent(agent_id or None).middleware, *type_paths(settings, type_name)]
    return list(dict.fromkeys(paths))


def configured(settings: Settings) -> list[tuple[str, str]]:
    """Every configured hook as ``(setting, path)``, the setting named as its variable."""
    found = []
    for agent_id, agent in settings.agents.items():
        name = f"FANBOT_AGENTS__{agent_id.upper()}__MIDDLEWARE"
        found += [(f"{name}[{i}]", path) for i, path in enumerate(agent.middleware)]
    for t, sub_type in enumerate(settings.subagent_types):
        name = f"FANBOT_SUBAGENT_TYPES[{t}].middleware"
        found += [(f"{name}[{i}]", path) for i, path in enumerate(sub_type.middleware)]
    return found


def check(settings: Settings) -> None:
    """Import every configured hook now (a worker does before it serves; its forks inherit
    the modules).

    Raises:
        ConfigError: One names nothing callable: one line naming the setting and the path.
    """
    for setting, path in configured(settings):
        try:
            resolve(path)
        except HookNotFound as exc:
            raise ConfigError(f"{setting} {path!r}: {' '.join(str(exc).split())}") from None
