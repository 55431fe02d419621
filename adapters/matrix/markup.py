"""Model markdown → Matrix ``body`` (plain) and ``formatted_body`` (sanitized HTML).

The plain ``body`` is the markdown source itself, as Element sends it; the HTML is
rendered with markdown-it-py (CommonMark plus tables and strikethrough, raw HTML
disabled) and then cleaned with nh3 down to the tags and attributes the Matrix spec
recommends clients accept, so nothing a model writes can smuggle markup into a client.
Images become links (Matrix HTML only shows ``mxc://`` images), and a link without a label
shows its URL, so nothing visible in the markdown disappears from the HTML.

A Matrix event is at most 64 KiB; a part whose body and HTML would not fit in
:data:`MAX_CONTENT_BYTES` is split further, whatever the configured character limit.
"""

from __future__ import annotations

import html as html_lib
import json
from dataclasses import dataclass
from typing import Protocol

import nh3
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token


class Chunker(Protocol):
    """Splits markdown into parts of at most ``limit`` characters (``bot.text.chunking``)."""

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
_RENDERER = RendererHTML()

MAX_CONTENT_BYTES = 48_000
"""``body`` plus ``formatted_body`` as JSON, leaving the rest of 64 KiB to the envelope."""
_MIN_SPLIT = 64


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
    tokens = _md.parse(body)
    for token in tokens:
        if token.children:
            token.children = _readable_links(token.children)
    html = sanitize(_md.renderer.render(tokens, _md.options, {})).strip()
    if _is_plain(html, body):
        return Rendered(body=body, html=None)
    return Rendered(body=body, html=html)


def _readable_links(children: list[Token]) -> list[Token]:
    """Images -> links labelled with their alt text; empty link labels -> the URL."""
    out: list[Token] = []
    for token in children:
        if token.type == "image":
            src = str(token.attrGet("src") or "")
            alt = _RENDERER.renderInlineAsText(token.children or [], _md.options, {})
            out += [
                Token("link_open", "a", 1, attrs={"href": src}),
                Token("text", "", 0, content=alt or src),
                Token("link_close", "a", -1),
            ]
            continue
        if token.type == "link_close" and out and out[-1].type == "link_open":
            out.append(Token("text", "", 0, content=str(out[-1].attrGet("href") or "")))
        out.append(token)
    return out


def _is_plain(html: str, body: str) -> bool:
    if not (html.startswith("<p>") and html.endswith("</p>")):
        return False
    inner = html[3:-4].replace("<br>\n", "\n").replace("<br />\n", "\n")
    return "<" not in inner and html_lib.unescape(inner) == body


def render_chunks(markdown: str, *, limit: int, chunker: Chunker) -> list[Rendered]:
    """Split ``markdown`` to ``limit`` characters and render each part (each fits an event)."""
    parts = [r for part in chunker(markdown, limit=limit) for r in _fit(part, limit, chunker)]
    return parts or [Rendered(body=markdown.strip() or "(empty)", html=None)]


def _fit(part: str, limit: int, chunker: Chunker) -> list[Rendered]:
    if not part.strip():
        return []
    rendered = render(part)
    smaller = min(len(part), limit) // 2
    if _content_bytes(rendered) <= MAX_CONTENT_BYTES or smaller < _MIN_SPLIT:
        return [rendered]
    return [r for piece in chunker(part, limit=smaller) for r in _fit(piece, smaller, chunker)]


def _content_bytes(rendered: Rendered) -> int:
    return len(json.dumps([rendered.body, rendered.html], ensure_ascii=False).encode())
