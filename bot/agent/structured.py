"""Structured results: a subagent type's ``output_schema`` and the answer that must match it.

Pure functions. The final answer is JSON, bare or inside a fenced ```json block; it is
checked with ``jsonschema``; a mismatch earns one correction turn (:func:`correction`);
what matches is stored normalized (:func:`normalized`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.agent.tools.json_schema import schema_problem

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)\n?[ \t]*```", re.S | re.I)


@dataclass(frozen=True, kw_only=True)
class Checked:
    """An answer checked against a schema: ``value`` when it matches, else ``problem``."""

    value: Any = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def instructions(schema: Mapping[str, Any]) -> str:
    """What the system prompt adds for a structured type."""
    return (
        "\n\nYour final answer must be only a JSON value (optionally in a ```json fence) "
        "that matches this JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
    )


def extract_json(text: str) -> Any:
    """The JSON value in ``text``: the whole text, else its first fenced block.

    Raises:
        ValueError: Neither is valid JSON (the message says why).
    """
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))]
    error = "the answer is empty"
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return json.loads(candidate)
        except (json.JSONDecodeError, RecursionError) as exc:
            error = f"it is not valid JSON ({getattr(exc, 'msg', exc)})"
    raise ValueError(error)


def check(schema: Mapping[str, Any], text: str) -> Checked:
    """Whether the answer ``text`` holds JSON matching ``schema``."""
    try:
        value = extract_json(text)
    except ValueError as exc:
        return Checked(problem=str(exc))
    problem = schema_problem(schema, value)
    if problem is not None:
        return Checked(problem=f"it does not match the schema: {problem}")
    return Checked(value=value)


def correction(problem: str) -> str:
    """The one user message a non-matching answer gets."""
    return (
        f"Your answer cannot be used: {problem}. Reply again with only the JSON value that "
        "matches the schema from your instructions, nothing else."
    )


def normalized(value: Any) -> str:
    """How a matching value is stored: compact JSON, keys in the model's order."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
