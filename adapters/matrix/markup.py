"""Model markdown → Matrix ``body`` (plain) and ``formatted_body`` (sanitized HTML).

The plain ``body`` is the markdown source itself, as Element sends it; the HTML is
rendered with markdown-it-py (CommonMark plus tables and strikethrough, raw HTML
disabled) and then cleaned with nh3 down to the tags and attributes the Matrix spec
recommends clients accept, so nothing a model writes can smuggle markup into a client.
"""

from __future__ import annotations

import html as html_lib
from dataclasses import dataclass
from typing import Protocol

import nh3
from markdown_it import MarkdownIt


class Chunker(Protocol):
    """Splits markdown into parts of at most ``limit`` characters (``bot.chunking``)."""

    def __call__(self, text: str, *, limit: int) -> list[str]: ...


# The tag list of the Matrix client-server spec, "m.room.message msgtypes / HTML".
ALLOWED_TAGS = frozenset(
    {"del", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "p", "a", "ul", "ol", "sup"}
    | {"sub", "li", "b", "i", "u", "strong", "em", "s", "code", "hr", "br", "div", "table"}
    | {"thead", "tbody", "tr", "th", "td", "caption", "pre", "span", "details", "summary"}
)
ALLOWED_ATTRIBUTES = {
    "a": {"href", "target"},
    "ol": {"start"},
    "code": {"class"},
    "span": {"data-mx-color", "data-mx-bg-color", "data-mx-spoiler"},
}
URL_SCHEMES = frozenset({"http", "https", "ftp", "mailto", "magnet", "matrix"})

_md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """One message's text: ``html`` is ``None`` when plain text says it all."""

    body: str
    html: str | None


def sanitize(html: str) -> str:
    """Keep only the Matrix-recommended tags, attributes and link schemes."""
    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        attributes={tag: set(attrs) for tag, attrs in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel=None,
    )


def render(markdown: str) -> Rendered:
    """Render markdown for one ``m.room.message``."""
    body = markdown.strip()
    html = sanitize(_md.render(body)).strip()
    if _is_plain(html, body):
        return Rendered(body=body, html=None)
    return Rendered(body=body, html=html)


def _is_plain(html: str, body: str) -> bool:
    if not (html.startswith("<p>") and html.endswith("</p>")):
        return False
    inner = html[3:-4].replace("<br>\n", "\n").replace("<br />\n", "\n")
    return "<" not in inner and html_lib.unescape(inner) == body


def render_chunks(markdown: str, *, limit: int, chunker: Chunker) -> list[Rendered]:
    """Split ``markdown`` to ``limit`` characters and render each part."""
    return [render(part) for part in chunker(markdown, limit=limit) if part.strip()] or [
        Rendered(body=markdown.strip() or "(empty)", html=None)
    ]
