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
