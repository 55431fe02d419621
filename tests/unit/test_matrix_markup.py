"""Markdown → Matrix body / sanitized formatted_body."""

from __future__ import annotations

import pytest

from adapters.matrix.markup import Rendered, render, render_chunks, sanitize


@pytest.mark.parametrize("text", ["hello world", "a < b & c", "line1\nline2"])
def test_plain_text_has_no_html(text: str) -> None:
    assert render(text) == Rendered(body=text, html=None)


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("hello **world**", "<p>hello <strong>world</strong></p>"),
        ("`x<y`", "<p><code>x&lt;y</code></p>"),
        ("```py\nprint(1)\n```", '<pre><code class="language-py">print(1)\n</code></pre>'),
        ("~~old~~", "<p><s>old</s></p>"),
        ("[site](https://example.org)", '<p><a href="https://example.org">site</a></p>'),
        ("- a\n- b", "<ul>\n<li>a</li>\n<li>b</li>\n</ul>"),
    ],
)
def test_markdown_renders_to_html_with_markdown_body(markdown: str, html: str) -> None:
    assert render(markdown) == Rendered(body=markdown, html=html)


def test_raw_html_and_script_links_never_reach_formatted_body() -> None:
    rendered = render("**x** <img src=x onerror=alert(1)> [y](javascript:alert(1))")
    assert rendered.html is not None
    assert "<img" not in rendered.html and 'href="javascript' not in rendered.html


def test_sanitize_keeps_matrix_tags_only() -> None:
    dirty = '<p onclick="x">a</p><script>b</script><span data-mx-color="#f00" style="x">c</span>'
    assert sanitize(dirty) == '<p>a</p><span data-mx-color="#f00">c</span>'


def test_render_chunks_uses_the_given_chunker() -> None:
    def halves(text: str, *, limit: int) -> list[str]:
        return [text[: len(text) // 2], text[len(text) // 2 :]]

    assert [r.body for r in render_chunks("abcdef", limit=10, chunker=halves)] == ["abc", "def"]
