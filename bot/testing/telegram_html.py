"""Telegram's HTML parse mode as the Bot API checks it, for :mod:`bot.testing.fake_telegram`.

Only the behaviour a bot can observe is modelled: which tags are accepted, the error texts
(``can't parse entities: ...`` with UTF-8 byte offsets, as Telegram words them) and the
visible text whose UTF-16 length counts against the 4096 limit.
"""

from __future__ import annotations

import html
import re

__all__ = ["HtmlParseError", "utf16_len", "visible_text"]

ALLOWED_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a"}
    | {"code", "pre", "blockquote", "tg-emoji"}
)
_ATTR = r"""\s+[a-zA-Z-]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>"']+))?"""
_TAG = re.compile(rf"<(/?)([a-zA-Z][\w-]*)((?:{_ATTR})*)\s*>")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#x[0-9a-fA-F]{1,6}|lt|gt|amp|quot);")


class HtmlParseError(ValueError):
    """The text is not valid Telegram HTML; ``str(error)`` is Telegram's description tail."""


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit Telegram counts in."""
    return len(text.encode("utf-16-le")) // 2


def visible_text(text: str) -> str:
    """Parse Telegram HTML and return the text a reader sees.

    Raises:
        HtmlParseError: Unsupported or unbalanced tags, as Telegram rejects them.
    """
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "<":
            i = _tag(text, i, stack)
        elif char == "&" and (entity := _ENTITY.match(text, i)):
            out.append(html.unescape(entity.group(0)))
            i = entity.end()
        else:
            out.append(char)
            i += 1
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


def _tag(text: str, i: int, stack: list[str]) -> int:
    offset = len(text[:i].encode())
    match = _TAG.match(text, i)
    if match is None:
        shown = re.match(r"/?([^\s>]*)", text[i + 1 :]).group(1)  # type: ignore[union-attr]
        raise HtmlParseError(f'Unsupported start tag "{shown}" at byte offset {offset}')
    closing, name, attrs = match.group(1), match.group(2).lower(), match.group(3)
    if closing:
        if not stack:
            raise HtmlParseError(f"Unexpected end tag at byte offset {offset}")
        if stack[-1] != name:
            raise HtmlParseError(
                f'Unmatched end tag at byte offset {offset}, expected "</{stack[-1]}>", '
                f'found "</{name}>"'
            )
        stack.pop()
    else:
        if name not in ALLOWED_TAGS:
            raise HtmlParseError(f'Unsupported start tag "{name}" at byte offset {offset}')
        if name == "span" and "tg-spoiler" not in attrs:
            raise HtmlParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {offset}')
        stack.append(name)
    return match.end()
