"""A fetched body as text a model can read.

HTML becomes markdown of the page's main content (trafilatura drops navigation, footers
and boilerplate), a PDF its text (pypdf), and text, JSON or XML stays as it is. Anything
else (images, archives) is refused with a short reason rather than shown as noise.

The parsing (:mod:`bot.text.pages`) is CPU-bound Python. In a threads-pool run, whose
process other runs share, it runs in this process's helper processes (:data:`PARSERS`, a
:class:`~bot.supervise.procpool.ProcessPool`), cut off after ``web.parse_timeout_seconds``;
elsewhere (the fork pool's work horse is a process of the run's own, a test) it runs here.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from functools import partial
from typing import Literal

from bot.errors import ToolError
from bot.supervise import abort
from bot.supervise.procpool import HelperFailed, ProcessPool
from bot.text.pages import html_to_markdown, pdf_to_text

Kind = Literal["html", "pdf", "text", "binary"]

_HTML = frozenset({"text/html", "application/xhtml+xml"})
_PDF = frozenset({"application/pdf", "application/x-pdf"})
_TEXT = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-ndjson"}
    | {"application/x-yaml", "application/yaml", "application/toml", "application/sql"}
)
_UNLABELLED = frozenset({"", "application/octet-stream", "binary/octet-stream"})

PARSE_TIMEOUT_SECONDS = 30.0
PARSERS = ProcessPool(name="parser", processes=2)
"""This process's helper processes for parsing (none until a threads-pool run parses)."""


def kind_of(body: bytes, content_type: str) -> Kind:
    """What ``body`` is, by its Content-Type; an unlabelled body is sniffed."""
    mime = content_type.partition(";")[0].strip().lower()
    if mime in _HTML:
        return "html"
    if mime in _PDF:
        return "pdf"
    if mime.startswith("text/") or mime in _TEXT or mime.endswith(("+json", "+xml")):
        return "text"
    if mime not in _UNLABELLED:
        return "binary"
    head = body[:4096]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    return "text" if _looks_like_text(head) else "binary"


def _looks_like_text(head: bytes) -> bool:
    try:  # incremental: ``head`` may end inside a multi-byte character
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def readable(
    body: bytes,
    *,
    content_type: str,
    charset: str | None,
    url: str,
    complete: bool,
    budget: int,
    timeout: float = PARSE_TIMEOUT_SECONDS,
) -> tuple[Kind, str]:
    """``body`` as text, and what it was.

    Args:
        body: The (possibly cut) body.
        content_type: The response's Content-Type.
        charset: The charset it declares, if any.
        url: Where it came from (resolves relative links in HTML).
        complete: False when the body was cut (a cut PDF cannot be read).
        budget: Characters the caller will keep; longer PDFs are not read further.
        timeout: Seconds the parsing may take in a helper process (see the module docstring).

    Raises:
        ToolError: Binary content, a PDF that cannot be read, or parsing that took longer
            than ``timeout`` or whose helper process died.
    """
    kind = kind_of(body, content_type)
    if kind == "html":
        html = body.decode(charset, "replace") if charset else body
        return kind, _parse(partial(html_to_markdown, html, url), "page", timeout)
    if kind == "pdf":
        if not complete:
            raise ToolError(
                f"refused: the PDF is larger than the download limit ({len(body):,} bytes)"
            )
        return kind, _parse(partial(pdf_to_text, body, budget=budget), "PDF", timeout)
    if kind == "text":
        return kind, body.decode(_codec(charset), "replace")
    mime = content_type.partition(";")[0].strip() or "unlabelled"
    raise ToolError(f"refused: {mime} content is not text ({len(body):,} bytes)")


def _codec(charset: str | None) -> str:
    try:
        return codecs.lookup(charset or "utf-8").name
    except LookupError:  # a made-up charset: UTF-8 with replacements beats failing
        return "utf-8"


def _parse(work: Callable[[], str], what: str, timeout: float) -> str:
    """``work()`` in a helper process in a threads-pool run, else here."""
    if abort.current() is None:
        return work()
    try:
        return PARSERS.call(work, timeout=timeout)
    except HelperFailed as exc:
        raise ToolError(f"could not read the {what}: {exc}") from None
