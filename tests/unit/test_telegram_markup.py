"""Markdown -> Telegram HTML, and splitting under the UTF-16 limit with fences intact."""

from __future__ import annotations

import pytest

from adapters.telegram.markup import render_parts, to_html, visible
from bot.testing.telegram_html import visible_text
from bot.text.chunking import utf16_len


@pytest.mark.parametrize(
    ("markdown", "html"),
    [
        ("plain", "plain"),
        ("**b** _i_ ~~s~~", "<b>b</b> <i>i</i> <s>s</s>"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("<b>not a tag</b> <script>x</script>", "&lt;b&gt;not a tag&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"),
        ("`x<y>`", "<code>x&lt;y&gt;</code>"),
        ("# Title", "<b>Title</b>"),
        ("[site](https://e.com/?a=1&b=\"2\")", '<a href="https://e.com/?a=1&amp;b=%222%22">site</a>'),
        ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),  # not a link
        ("[f](ftp://h/x)", "f"),
        ("- one\n- two", "• one\n• two"),
        ("3. c\n4. d", "3. c\n4. d"),
        ("- a\n  - b", "• a\n  • b"),
        ("> quoted", "<blockquote>quoted</blockquote>"),
        ("```python\nif a < b:\n    pass\n```", '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'),
        ("```\nx & y\n```", "<pre>x &amp; y</pre>"),
        ("    indented code", "<pre>indented code</pre>"),
        ("line1\nline2", "line1\nline2"),
        ("---", "———"),
        ("| a | bb |\n|---|---|\n| 1 | 2 |", "<pre>a | bb\n--+---\n1 | 2</pre>"),
        ("<div>\nblock & html\n</div>", "&lt;div&gt;\nblock &amp; html\n&lt;/div&gt;"),
        ("", ""),
    ],
)  # fmt: skip
def test_to_html(markdown: str, html: str) -> None:
    assert to_html(markdown) == html
    visible_text(to_html(markdown))  # Telegram's parser (the fake's) accepts it


@pytest.mark.parametrize(
    "hostile",
    ["<", "&", "</b>", "<b>", "a<b", "&amp;", "&#x3C;", "**<i>**", "`</code>`", "[<x>](http://a)"],
)
def test_model_text_never_forms_tags(hostile: str) -> None:
    rendered = to_html(hostile)
    shown = visible_text(rendered)  # Telegram's parser accepts it ...
    assert shown == visible(rendered)
    assert shown.count("<") >= hostile.count("<")  # ... and every "<" stays visible text


def test_parts_keep_code_blocks_whole_and_fit_the_limit() -> None:
    code = "\n".join(f"line {i} 🙂 a<b" for i in range(200))
    parts = render_parts(f"intro\n\n```py\n{code}\n```\n\noutro", limit=300)
    assert len(parts) > 3
    for part in parts:
        assert utf16_len(visible_text(part.html)) <= 300
        assert utf16_len(part.source) <= 300  # the plain-text fallback fits too
        assert part.source.count("```") % 2 == 0
    shown = "\n".join(visible(p.html) for p in parts)
    for i in range(200):
        assert f"line {i} 🙂 a<b" in shown
    assert all('<pre><code class="language-py">' in p.html for p in parts[1:-1])


def test_overlong_line_is_cut_on_code_points() -> None:
    parts = render_parts("🙂" * 5000)  # 10,000 UTF-16 units on one line
    assert "".join(visible(p.html) for p in parts) == "🙂" * 5000
    assert all(utf16_len(visible(p.html)) <= 4096 for p in parts)


def test_render_parts_resplits_when_rendering_grows_the_text() -> None:
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {'x' * 30} | y |" for _ in range(60))
    parts = render_parts(table, limit=500)
    assert len(parts) > 1
    assert all(utf16_len(visible_text(p.html)) <= 500 for p in parts)


def test_render_parts_drops_empty_parts() -> None:
    assert render_parts("   \n\n  ") == []


def test_render_parts_uses_the_given_splitter() -> None:
    seen: list[int] = []

    def splitter(text: str, limit: int) -> list[str]:
        seen.append(limit)
        return text.split("|")

    parts = render_parts("one|two", splitter=splitter)
    assert [p.source for p in parts] == ["one", "two"] and seen == [4096]
