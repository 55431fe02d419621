"""What web_fetch makes of a body: its kind, and the text a model reads."""

from __future__ import annotations

import io

import pypdf
import pytest

from bot.agent.tools.extract import kind_of, readable
from bot.errors import ToolError


@pytest.mark.parametrize(
    ("content_type", "body", "kind"),
    [
        ("text/html; charset=utf-8", b"", "html"),
        ("application/xhtml+xml", b"", "html"),
        ("application/pdf", b"", "pdf"),
        ("text/plain", b"%PDF-1.4", "text"),  # the label wins when there is one
        ("text/csv", b"a,b", "text"),
        ("application/json", b"{}", "text"),
        ("application/ld+json", b"{}", "text"),
        ("application/atom+xml", b"<feed/>", "text"),
        ("image/png", b"\x89PNG", "binary"),
        ("application/zip", b"PK", "binary"),
        ("", b"%PDF-1.7\n...", "pdf"),  # unlabelled: sniffed
        ("application/octet-stream", b"  <!DOCTYPE html><html>", "html"),
        ("", b"<html><body>hi</body></html>", "html"),
        ("", "plain words, é".encode(), "text"),
        ("", b"\x00\x01\x02binary", "binary"),
        ("", b"\xff\xfe\xfa", "binary"),
        ("", "é".encode() * 2048 + b"\xc3", "text"),  # cut inside a character: still text
    ],
)
def test_kind_of(content_type: str, body: bytes, kind: str) -> None:
    assert kind_of(body, content_type) == kind


def text_of(
    body: bytes, content_type: str, charset: str | None = None, complete: bool = True
) -> str:
    return readable(
        body,
        content_type=content_type,
        charset=charset,
        url="https://x.test/",
        complete=complete,
        budget=10_000,
    )[1]


def test_html_declares_its_charset_in_the_page_or_the_header() -> None:
    page = "<html><head><meta charset='iso-8859-1'><title>Café</title></head><body><p>Été</p></body></html>"
    assert text_of(page.encode("iso-8859-1"), "text/html") == "# Café\n\nÉté"
    assert text_of("<p>Été</p>".encode("cp1252"), "text/html; charset=cp1252", "cp1252") == "Été"


def test_text_with_an_unknown_charset_is_read_as_utf8() -> None:
    assert text_of("naïve".encode(), "text/plain; charset=klingon", "klingon") == "naïve"


def blank_pdf() -> bytes:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_pdfs_that_cannot_be_read_are_explained() -> None:
    assert text_of(blank_pdf(), "application/pdf") == (
        "(a PDF of 1 pages without extractable text: scanned images, perhaps)"
    )
    with pytest.raises(ToolError, match=r"^not a readable PDF"):
        text_of(b"%PDF-1.4\ngarbage", "application/pdf")
    with pytest.raises(ToolError, match=r"^refused: the PDF is larger than the download limit"):
        text_of(blank_pdf()[:100], "application/pdf", complete=False)
