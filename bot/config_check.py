"""Pure checks behind :mod:`bot.config`'s one-line errors: unknown keys (with a "did you
mean"), Redis URLs without a scheme, and how a configured URL is shown (no password).

Nothing here reads the environment or a file; :func:`bot.config.load_settings` does.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from bot.redis.url import SCHEMES as REDIS_SCHEMES
from bot.redis.url import problem as redis_url_detail
from bot.redis.url import public_url as public_url  # shown in errors by its old name
from bot.redis.url import scheme_of


def unknown_keys(data: Mapping[str, Any], model: type[BaseModel], path: str = "") -> list[str]:
    """Dotted paths of the keys in ``data`` (parsed TOML) that ``model`` has no field for,
    at every nesting level (sections, ``[agents.<id>]`` tables, ``[[subagent_types]]``),
    each with a "did you mean" when a field name is close."""
    found: list[str] = []
    fields = type_fields(model)
    for key, value in data.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in fields:
            near = closest(str(key), fields)
            hint = f" (did you mean {path + '.' if path else ''}{near}?)" if near else ""
            found.append(here + hint)
            continue
        found.extend(_unknown_inside(value, fields[key], here))
    return found


def _unknown_inside(value: Any, annotation: Any, here: str) -> list[str]:
    nested = section_of(annotation)
    if nested is None:
        return []
    kind, model = nested
    if kind == "model" and isinstance(value, Mapping):
        return unknown_keys(value, model, here)
    if kind == "dict" and isinstance(value, Mapping):
        return [k for name, v in value.items() for k in _unknown_inside(v, model, f"{here}.{name}")]
    if kind == "list" and isinstance(value, list):
        return [k for i, v in enumerate(value) for k in _unknown_inside(v, model, f"{here}[{i}]")]
    return []


def type_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Field name -> annotation of ``model``."""
    return {name: info.annotation for name, info in model.model_fields.items()}


def section_of(annotation: Any) -> tuple[str, Any] | None:
    """``("model", M)`` for ``M`` / ``M | None``, ``("dict", M)`` for ``dict[str, M]``,
    ``("list", M)`` for ``list[M]``; None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        inner = [section_of(a) for a in args if a is not type(None)]
        return next((i for i in inner if i is not None), None)
    if origin is dict and len(args) == 2 and section_of(args[1]) is not None:
        return "dict", args[1]
    if origin is list and args and section_of(args[0]) is not None:
        return "list", args[0]
    return None


def closest(key: str, choices: Mapping[str, Any]) -> str | None:
    """The name in ``choices`` closest to ``key`` (a likely misspelling), if any is close."""
    close = difflib.get_close_matches(key.lower(), list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings section that holds the last element of ``loc`` (a pydantic error
    location), or None when ``loc`` does not lead through sections."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(current, type) and issubclass(current, BaseModel):
            nested = section_of(type_fields(current).get(str(part)))
            current = None if nested is None else (nested[1] if nested[0] == "model" else nested)
        elif isinstance(current, tuple):  # a dict or list of sections: skip the key/index
            current = current[1]
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def redis_url_problem(value: str) -> str | None:
    """Why ``value`` is not a Redis URL redis-py can use (None if it is), with the fix."""
    if "://" not in value:
        fix = f"unix://{value}" if value.startswith("/") else f"redis://{value}"
        if not value.startswith("/") and "/" not in value:
            fix += "/0"
        return f"{value!r} has no scheme; write {fix}"
    scheme = scheme_of(value)
    if scheme not in REDIS_SCHEMES:
        return (
            f"{public_url(value)!r} has scheme {scheme!r}; use redis://host:6379/0, "
            "rediss:// (TLS), unix:///path/to/redis.sock or "
            "redis+sentinel://host1:26379,host2:26379/<service_name>"
        )
    return redis_url_detail(value)


def unknown_env(
    environ: Mapping[str, str], model: type[BaseModel], *, prefix: str, known: frozenset[str]
) -> list[tuple[str, str | None]]:
    """The ``prefix``-ed names in ``environ`` that set nothing ``model`` has (pydantic-settings
    ignores an unknown top-level name, and a name under a plain value), each with a "did you
    mean" (the closest name, or None): ``FANBOT_REDIS_URLL``, ``FANBOT_TELEGRAM_BOT_TOKEN``. ``known`` are the names read
    outside the settings (``FANBOT_CONFIG``). A free key of a table of sections
    (``FANBOT_MODELS__ENDPOINTS__LOCAL__BASE_URL``) is any name."""
    found: list[tuple[str, str | None]] = []
    names = dict.fromkeys(n.removeprefix(prefix).lower() for n in env_names(model, prefix))
    for name in sorted(environ):
        if not name.upper().startswith(prefix) or name.upper() in known:
            continue
        parts = name[len(prefix) :].lower().split("__")
        if _env_path_known(model, parts):
            continue
        near = closest(name[len(prefix) :], names)
        found.append((name, f"{prefix}{near.upper()}" if near else None))
    return found


def _env_path_known(model: type[BaseModel], parts: list[str]) -> bool:
    """Whether ``parts`` (``["openai", "base_url"]``) lead to a setting of ``model``."""
    fields = type_fields(model)
    if parts[0] not in fields:
        return False
    rest = parts[1:]
    if not rest:
        return True
    nested = section_of(fields[parts[0]])
    if nested is None:  # a plain value: a table (dict[str, str]) or list takes any key
        origin = get_origin(_unwrap(fields[parts[0]]))
        return origin in (dict, list)
    kind, inner = nested
    if kind == "model":
        return _env_path_known(inner, rest)
    if kind == "dict":  # a free key, then the section's own fields
        return len(rest) == 1 or _env_path_known(inner, rest[1:])
    return True  # a list of sections: JSON, checked by the model


def _unwrap(annotation: Any) -> Any:
    """``X`` for ``X | None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def env_names(model: type[BaseModel], prefix: str) -> list[str]:
    """Every environment name that sets a value of ``model`` (sections walked; the keys of a
    table of sections are free, so their names are left out)."""
    names: list[str] = []
    for field, annotation in type_fields(model).items():
        name = f"{prefix}{field.upper()}"
        names.append(name)
        nested = section_of(annotation)
        if nested is not None and nested[0] == "model":
            names.extend(env_names(nested[1], name + "__"))
    return names
