"""How a :class:`~bot.types.RunRecord` is stored as a flat Redis hash, and read back.

Each field is converted by its declared type, so adding a field to ``RunRecord`` is a
one-place edit: a field of a type listed here needs nothing else, and a field of a new
type fails at import time until this module learns it. ``None`` is stored as ``""``.
"""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from bot.store import as_text
from bot.types import RunRecord, ThreadRef

Decoder = Callable[[str], Any]


def _optional_float(value: str) -> float | None:
    return float(value) if value else None


def _optional_int(value: str) -> int | None:
    return int(value) if value else None


def _decoder(hint: Any) -> Decoder:
    if hint is str:
        return str
    if hint is bool:
        return lambda v: v.strip().lower() in ("1", "true")
    if hint is int:
        return lambda v: int(v or 0)
    if hint is float:
        return lambda v: float(v or 0)
    if hint == float | None:
        return _optional_float
    if hint == int | None:
        return _optional_int
    if hint is ThreadRef:
        return lambda v: ThreadRef.from_json(json.loads(v))
    if hint == tuple[str, ...]:
        return lambda v: tuple(json.loads(v or "[]"))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    raise TypeError(f"RunRecord: no codec for a field of type {hint!r}; add one here")


_DECODERS: dict[str, Decoder] = {
    name: _decoder(hint) for name, hint in typing.get_type_hints(RunRecord).items()
}


def _encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, ThreadRef):
        return json.dumps(value.to_json())
    if isinstance(value, tuple):
        return json.dumps(list(value))
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def encode_record(record: RunRecord) -> dict[str, str]:
    """RunRecord -> flat string mapping for HSET."""
    return {f.name: _encode(getattr(record, f.name)) for f in fields(record)}


def decode_record(raw: Mapping[Any, Any]) -> RunRecord:
    """A hash as read from Redis (bytes or str) -> RunRecord; unknown keys are ignored,
    missing ones take the field's default."""
    data = {as_text(k): as_text(v) for k, v in raw.items()}
    return RunRecord(
        **{name: decode(data[name]) for name, decode in _DECODERS.items() if name in data}
    )
