"""Shortening text without cutting a sentence (pure).

Used where a shortened text is read as prose by a model or a person: a compaction's
summary and the results a fan-in repeats (docs/models.md, "Threads that outgrow the window").
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n\s*\n")


def clip_sentences(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` at a paragraph or sentence end (never inside a
    sentence; a first sentence longer than that is cut at a word with an ellipsis), pure."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    best = 0
    for match in _SENTENCE_END.finditer(text):
        if match.start() > max_chars - 2:
            break
        best = match.start()
    if best:
        return text[:best].rstrip() + " …"
    head = text[: max_chars - 2]
    space = head.rfind(" ")
    return (head[:space] if space > max_chars // 2 else head).rstrip() + " …"
