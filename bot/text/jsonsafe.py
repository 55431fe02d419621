"""JSON from the network, parsed so that hostile input fails cleanly.

``json.loads`` raises :class:`RecursionError` (not :class:`ValueError`) on deeply nested
input, and a body that is not UTF-8 raises :class:`UnicodeDecodeError` before parsing
starts; code that reads "bad JSON is a ValueError" would answer such a request with a 500
and a traceback. :func:`loads` turns all of them into one :class:`ValueError`, and also
refuses nesting deeper than any real platform payload, so nothing downstream (pydantic,
an SDK, a log line) recurses over it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
"""Slack, Telegram and Matrix payloads nest a dozen levels at most."""


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``raw`` (UTF-8 bytes or text) as JSON no deeper than ``max_depth``.

    Raises:
        ValueError: Not UTF-8, not JSON, or nested too deeply.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc.reason}") from None
    if depth(value, limit=max_depth) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth}")
    return value


def depth(value: Any, *, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of containers in ``value`` (a scalar is 0), counted up to ``limit + 1``.

    Iterative, so it cannot itself hit the recursion limit.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > limit:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest
