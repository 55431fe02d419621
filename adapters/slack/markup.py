"""Markdown (as models write it) -> Slack mrkdwn, and splitting below Slack's limits (pure).

Conversion is slackify-markdown (a markdown-it renderer) with two fixes: code spans and
blocks are entity-escaped too (Slack parses ``<...>`` and ``&`` everywhere, and a user's
own code comes back escaped the same way), and a code block's first line is kept even
when it is a ``#!`` shebang (the library drops it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from slackify_markdown.slackify import SlackifyMarkdown

from bot.text.chunking import split_markdown

Chunker = Callable[[str, int], list[str]]
"""``(text, limit) -> parts``, each at most ``limit`` characters, code fences balanced."""

FENCE = "```"
# ``<!channel>``, ``<!here>``, ``<!everyone>``, ``<!subteam^ID>`` notify whole groups; model
# output (which may echo a prompt injection) must never do that, so they are shown as text.
_BROADCAST = re.compile(r"<(!(?:channel|here|everyone|subteam\^[^>|]*)(?:\|[^>]*)?)>")


def escape(text: str) -> str:
    """Escape the three characters Slack treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Renderer(SlackifyMarkdown):  # type: ignore[misc]
    def code_inline(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return f"`{escape(tokens[idx].content)}`"

    def fence(self, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        content = escape(tokens[idx].content)
        if content and not content.endswith("\n"):
            content += "\n"
        return f"{FENCE}\n{content}{FENCE}\n"

    code_block = fence


def to_mrkdwn(markdown: str) -> str:
    """Convert model markdown to Slack mrkdwn (bold, italics, links, lists, code)."""
    if not markdown.strip():
        return markdown
    rendered: str = _Renderer(markdown).slackify()
    rendered = _BROADCAST.sub(lambda m: f"&lt;{m[1]}&gt;", rendered)
    return rendered.rstrip("\n")


def split(text: str, limit: int) -> list[str]:
    """Split converted text into parts of at most ``limit`` characters, fences balanced.

    Slack's code fences are markdown's, so :func:`bot.text.chunking.split_markdown` applies.
    """
    return split_markdown(text, limit=limit)
