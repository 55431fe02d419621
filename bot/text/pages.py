"""A fetched page or PDF as text: the CPU-heavy parsing ``web_fetch`` does.

HTML becomes markdown of the page's main content (trafilatura drops navigation, footers
and boilerplate), a PDF its text (pypdf). In a threads-pool worker these run in a helper
process (:mod:`bot.agent.tools.extract`), so this module is what that process imports:
nothing but the standard library and :mod:`bot.errors` at import time, the parser of the
call when it is called.
"""

from __future__ import annotations

import io

from bot.errors import ToolError


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
    import pypdf
    from pypdf.errors import PyPdfError

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
