"""Counting tokens before a call (pure).

The interface every caller uses; how a count is made (a tokenizer where one is known for
the model, a documented estimate otherwise) is decided here only (docs/models.md,
"Counting tokens").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

CHARS_PER_TOKEN = 4
"""The estimate: one token per this many characters of the request's JSON."""
PER_MESSAGE = 4
"""Tokens each message costs beyond its text (its role and separators)."""


def count_text(text: str, *, model: str = "") -> int:
    """Tokens of ``text`` for ``model``."""
    return -(-len(text) // CHARS_PER_TOKEN)


def count_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = (), *, model: str = ""
) -> int:
    """Tokens a request of ``messages`` and ``tools`` takes of ``model``'s window."""
    total = 0
    for message in messages:
        total += PER_MESSAGE + count_text(json.dumps(message, ensure_ascii=False, default=str))
    if tools:
        total += count_text(json.dumps(list(tools), ensure_ascii=False, default=str))
    return total
