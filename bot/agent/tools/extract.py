"""A fetched body as text a model can read.

HTML becomes markdown of the page's main content (trafilatura drops navigation, footers
and boilerplate), a PDF its text (pypdf), and text, JSON or XML stays as it is. Anything
else (images, archives) is refused with a short reason rather than shown as noise.
"""

from __future__ import annotations

import codecs
import io
from typing import Literal

import pypdf
from pypdf.errors import PyPdfError

from bot.errors import ToolError

Kind = Literal["html", "pdf", "text", "binary"]

_HTML = frozenset({"text/html", "application/xhtml+xml"})
_PDF = frozenset({"application/pdf", "application/x-pdf"})
_TEXT = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-ndjson"}
    | {"application/x-yaml", "application/yaml", "application/toml", "application/sql"}
)
_UNLABELLED = frozenset({"", "application/octet-stream", "binary/octet-stream"})


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
    body: bytes, *, content_type: str, charset: str | None, url: str, complete: bool, budget: int
) -> tuple[Kind, str]:
    """``body`` as text, and what it was.

    Args:
        body: The (possibly cut) body.
        content_type: The response's Content-Type.
        charset: The charset it declares, if any.
        url: Where it came from (resolves relative links in HTML).
        complete: False when the body was cut (a cut PDF cannot be read).
        budget: Characters the caller will keep; longer PDFs are not read further.

    Raises:
        ToolError: Binary content, or a PDF that cannot be read.
    """
    kind = kind_of(body, content_type)
    if kind == "html":
        return kind, html_to_markdown(body.decode(charset, "replace") if charset else body, url)
    if kind == "pdf":
        if not complete:
            raise ToolError(
                f"refused: the PDF is larger than the download limit ({len(body):,} bytes)"
            )
        return kind, pdf_to_text(body, budget=budget)
    if kind == "text":
        return kind, body.decode(_codec(charset), "replace")
    mime = content_type.partition(";")[0].strip() or "unlabelled"
    raise ToolError(f"refused: {mime} content is not text ({len(body):,} bytes)")


def _codec(charset: str | None) -> str:
    try:
        return codecs.lookup(charset or "utf-8").name
    except LookupError:  # a made-up charset: UTF-8 with replacements beats failing
        return "utf-8"


def html_to_markdown(html: str | bytes, url: str) -> str:
    """Markdown of the page's main content, titled; all visible text when none is found.

    Bytes are decoded by trafilatura, which reads the page's own ``<meta charset>``.
    """
    # Imported here: it costs ~0.15 s and must never keep a worker from starting.
    import trafilatura

    tree = trafilatura.load_html(html)
    if tree is None:  # trafilatura refuses fragments without <html>; some servers send them
        tree = trafilatura.load_html(_as_document(html))
    if tree is None:
        return ""
    title = " ".join((tree.findtext(".//title") or "").split())
    text = trafilatura.extract(
        tree,
        url=url,
        output_format="markdown",
        include_links=True,
        include_formatting=True,
        include_tables=True,
    )
    text = str(text or trafilatura.html2txt(tree) or "").strip()
    if title and not text.startswith("#"):
        text = f"# {title}\n\n{text}"
    return text


def _as_document(html: str | bytes) -> str | bytes:
    if isinstance(html, bytes):
        return b"<html><body>" + html + b"</body></html>"
    return "<html><body>" + html + "</body></html>"


def pdf_to_text(body: bytes, *, budget: int) -> str:
    """The PDF's text, page by page, stopping once ``budget`` characters are read."""
    try:
        reader = pypdf.PdfReader(io.BytesIO(body))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ToolError("refused: the PDF is password-protected")
        pages, size = [], 0
        for page in reader.pages:
            text = page.extract_text() or ""
            pages.append(text.strip())
            size += len(text)
            if size >= budget:
                break
        total = len(reader.pages)
    except PyPdfError as exc:
        raise ToolError(f"not a readable PDF: {exc}") from None
    text = "\n\n".join(p for p in pages if p)
    if not text:
        return f"(a PDF of {total} pages without extractable text: scanned images, perhaps)"
    return f"(PDF, {total} pages)\n\n{text}"
