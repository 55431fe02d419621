"""Model markdown -> the HTML subset Telegram accepts, split under its 4096-unit limit.

Parsing is markdown-it-py's (CommonMark plus tables and strikethrough); rendering is ours
because Telegram knows only a few tags (``b i s u code pre a blockquote``): headings become
bold lines, lists become bullet lines, tables become preformatted text. Every piece of model
text goes through :func:`html.escape`, so nothing the model writes can form a tag.

Telegram counts the limit in UTF-16 code units of the *visible* text (after entity
parsing), so parts are measured after rendering and re-split when rendering grew them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bot.text.chunking import split_markdown, utf16_len

MAX_MESSAGE = 4096
Splitter = Callable[[str, int], list[str]]
"""``(markdown, limit) -> parts``, each at most ``limit`` UTF-16 units, fences intact."""

_MD = MarkdownIt("commonmark", {"html": True}).enable(["strikethrough", "table"])
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True, kw_only=True)
class Part:
    """One message's worth: ``html`` to send, ``source`` markdown for the plain fallback."""

    html: str
    source: str


def visible(html_text: str) -> str:
    """The text a reader sees for HTML produced by :func:`to_html`."""
    return html.unescape(_TAG.sub("", html_text))


def to_html(markdown: str) -> str:
    """Render markdown as Telegram HTML (``parse_mode=HTML``)."""
    root = SyntaxTreeNode(_MD.parse(markdown))
    return "\n\n".join(b for b in (_block(n, 0) for n in root.children) if b).strip()


def render_parts(
    markdown: str, *, limit: int = MAX_MESSAGE, splitter: Splitter | None = None
) -> list[Part]:
    """Split ``markdown`` and render each part so its visible text fits ``limit``."""
    split = splitter or split_utf16
    return [part for chunk in split(markdown, limit) for part in _fit(chunk, limit, split)]


def _fit(chunk: str, limit: int, split: Splitter) -> list[Part]:
    rendered = to_html(chunk)
    text = visible(rendered)
    if not text.strip():
        return []
    if utf16_len(text) <= limit:
        return [Part(html=rendered, source=chunk)]
    # Rendering grew the text (e.g. padded tables): split the source finer.
    smaller = min(utf16_len(chunk), limit) // 2
    if smaller < 32:
        return [Part(html=html.escape(chunk, quote=False), source=chunk)]
    return [part for piece in split(chunk, smaller) for part in _fit(piece, limit, split)]


# -- rendering ---------------------------------------------------------------------------
def _block(node: SyntaxTreeNode, depth: int) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inlines(node)
    if kind == "heading":
        return f"<b>{_inlines(node)}</b>"
    if kind in ("fence", "code_block"):
        return _code(node.content, node.info if kind == "fence" else "")
    if kind in ("bullet_list", "ordered_list"):
        return _list(node, depth)
    if kind == "blockquote":
        inner = "\n\n".join(b for b in (_block(c, depth) for c in node.children) if b)
        return f"<blockquote>{inner}</blockquote>"
    if kind == "hr":
        return "———"
    if kind == "table":
        return _table(node)
    if kind == "html_block":
        return html.escape(node.content.rstrip("\n"), quote=False)
    return "\n".join(_block(c, depth) for c in node.children)


def _code(content: str, info: str) -> str:
    body = html.escape(content.removesuffix("\n"), quote=False)
    lang = re.sub(r"[^\w+#.-]", "", info.split()[0]) if info.strip() else ""
    if lang:
        return f'<pre><code class="language-{lang}">{body}</code></pre>'
    return f"<pre>{body}</pre>"


def _list(node: SyntaxTreeNode, depth: int) -> str:
    start = node.attrs.get("start", 1) if node.type == "ordered_list" else 1
    lines = []
    for index, item in enumerate(node.children):
        marker = f"{int(start) + index}." if node.type == "ordered_list" else "•"
        blocks = [_block(child, depth + 1) for child in item.children]
        body = "\n".join(b for b in blocks if b)
        lines.append(f"{'  ' * depth}{marker} {body}")
    return "\n".join(lines)


def _table(node: SyntaxTreeNode) -> str:
    rows = [
        [_plain(cell) for cell in row.children]
        for section in node.children
        for row in section.children
    ]
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    if len(lines) > 1:
        lines.insert(1, "-+-".join("-" * w for w in widths))
    return f"<pre>{html.escape(chr(10).join(line.rstrip() for line in lines), quote=False)}</pre>"


def _plain(node: SyntaxTreeNode) -> str:
    """Text of an inline node (table cells: no tags in ``<pre>``, so links show their URL)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    inner = _alt(node)
    if node.type in ("link", "image"):
        href = str(node.attrs.get("href") or node.attrs.get("src") or "")
        return f"{inner} ({href})" if inner and href and href != inner else inner or href
    return inner


def _alt(node: SyntaxTreeNode) -> str:
    return "".join(_plain(child) for child in node.children)


def _inlines(node: SyntaxTreeNode) -> str:
    return "".join(_inline(child) for child in _inline_children(node))


def _inline_children(node: SyntaxTreeNode) -> list[SyntaxTreeNode]:
    children = node.children
    if len(children) == 1 and children[0].type == "inline":
        return children[0].children
    return children


_WRAP = {"strong": "b", "em": "i", "s": "s"}


def _inline(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind in ("text", "html_inline"):
        return html.escape(node.content, quote=False)
    if kind == "code_inline":
        return f"<code>{html.escape(node.content, quote=False)}</code>"
    if kind in ("softbreak", "hardbreak"):
        return "\n"
    if kind in _WRAP:
        return f"<{_WRAP[kind]}>{_inlines(node)}</{_WRAP[kind]}>"
    if kind in ("link", "image"):
        # An image's alt text is its children (markdown-it fills ``alt`` only when rendering).
        label = _inlines(node) if kind == "link" else html.escape(_alt(node), quote=False)
        href = str(node.attrs.get("href") or node.attrs.get("src") or "")
        if not href.lower().startswith(_SAFE_SCHEMES):
            return label or html.escape(href, quote=False)
        return f'<a href="{html.escape(href, quote=True)}">{label or html.escape(href)}</a>'
    return _inlines(node)


def split_utf16(markdown: str, limit: int) -> list[str]:
    """The shared fence-aware chunker, measuring in UTF-16 units like Telegram."""
    return split_markdown(markdown, limit=limit, length=utf16_len)
