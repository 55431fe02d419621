"""split_markdown: limits, cut preferences, code fences, UTF-16 and grapheme safety."""

from __future__ import annotations

import itertools
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.text.chunking import split_markdown, split_markdown_parts, utf16_len

CODE = "```python\n" + "\n".join(f"x_{i} = {i} * 2" for i in range(12)) + "\n```"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("short", 100, ["short"], id="fits"),
        pytest.param("", 10, [], id="empty"),
        pytest.param("\n\n  \n", 10, [], id="blank"),
        pytest.param("aaa\n\nbbb\n\nccc", 9, ["aaa", "bbb\n\nccc"], id="paragraph-break"),
        pytest.param("one\ntwo\nthree four", 12, ["one\ntwo", "three four"], id="line-break"),
        pytest.param("alpha beta gamma delta", 11, ["alpha beta", "gamma delta"], id="space-break"),
        pytest.param("abcdefghij", 4, ["abcd", "efgh", "ij"], id="hard-cut"),
        pytest.param(
            "para one is here\npara one goes on\n\npara two",
            40,
            ["para one is here\npara one goes on", "para two"],
            id="paragraph-beats-later-line-break",
        ),
        pytest.param(
            "intro\n```sh\necho hi\n```\ntail",
            22,
            ["intro", "```sh\necho hi\n```\ntail"],
            id="whole-block-moves-to-next-chunk",
        ),
        pytest.param(
            "```py\naaa\nbbb\nccc\n```",
            17,
            ["```py\naaa\nbbb\n```", "```py\nccc\n```"],
            id="fence-closed-and-reopened",
        ),
        pytest.param(
            "~~~~\nx ```\ny\n~~~~",
            15,
            ["~~~~\nx ```\n~~~~", "~~~~\ny\n~~~~"],
            id="tilde-fence-keeps-its-marker",
        ),
        pytest.param(
            "```js\nlet a = 1;\nlet b = 2;",
            20,
            ["```js\nlet a = 1;\n```", "```js\nlet b = 2;\n```"],
            id="unterminated-fence-is-closed",
        ),
        pytest.param(
            "```\n" + "z" * 12 + "\n```",
            12,
            ["```\nzzzz\n```", "```\nzzzz\n```", "```\nzzzz\n```"],
            id="long-code-line-hard-cut-inside-fence",
        ),
    ],
)
def test_split_markdown_table(text: str, limit: int, expected: list[str]) -> None:
    assert split_markdown(text, limit=limit) == expected


def test_long_code_block_spans_chunks_each_a_valid_block() -> None:
    text = "intro para here\n\n" + CODE + "\n\nAfter the code some words follow."
    chunks = split_markdown(text, limit=60)
    assert chunks[0] == "intro para here"
    assert chunks[-1] == "After the code some words follow."
    code_chunks = chunks[1:-1]
    assert len(code_chunks) > 1
    for chunk in code_chunks:
        assert chunk.startswith("```python\n") and chunk.endswith("\n```")
    lines = [line for c in code_chunks for line in c.splitlines() if not line.startswith("```")]
    assert lines == CODE.splitlines()[1:-1]


@pytest.mark.parametrize(
    ("s", "expected"),
    [("abc", 3), ("é", 1), ("😀", 2), ("👍🏽", 4), ("🇩🇪", 4), ("", 0)],
)
def test_utf16_len(s: str, expected: int) -> None:
    assert utf16_len(s) == expected


def test_utf16_limit_never_splits_an_astral_character() -> None:
    assert split_markdown("😀" * 5, limit=4, length=utf16_len) == ["😀😀", "😀😀", "😀"]


@pytest.mark.parametrize(
    "text",
    [
        "e\u0301" * 6,  # combining acute accents
        "👍🏽" * 4,  # skin-tone modifiers
        "👨\u200d👩\u200d👧" * 3,  # ZWJ family
        "🇩🇪🇫🇷🇯🇵",  # regional-indicator flags
        "a\r\nb\r\nc\r\n" * 3,
    ],
)
def test_hard_cuts_keep_grapheme_clusters_together(text: str) -> None:
    parts = split_markdown_parts(text, limit=5)
    assert len(parts) > 1
    for left, right in itertools.pairwise(parts):
        a, b = left.body[-1], right.body[0]
        assert unicodedata.category(b) not in ("Mn", "Me", "Mc")
        assert not "\U0001f3fb" <= b <= "\U0001f3ff"  # skin tone stays with its emoji
        assert "\u200d" not in (a, b)
        assert a + b != "\r\n"
        # A flag is two regional indicators: every part holds whole flags.
        assert sum("\U0001f1e6" <= c <= "\U0001f1ff" for c in left.body) % 2 == 0
    assert "".join(p.body for p in parts) == text


def test_telegram_sized_message() -> None:
    paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 20
    text = "\n\n".join([paragraph] * 8)
    chunks = split_markdown(text, limit=4096, length=utf16_len)
    assert len(chunks) > 1
    assert all(utf16_len(c) <= 4096 for c in chunks)
    assert all(c.endswith(".") for c in chunks)  # every cut fell on a paragraph break


def test_limit_too_small_for_one_character() -> None:
    with pytest.raises(ValueError, match="too small"):
        split_markdown("😀", limit=1, length=utf16_len)


def test_text_that_looks_like_a_fence_after_a_cut_is_not_cut_there() -> None:
    text = "word ```js and more words"
    for chunk in split_markdown(text, limit=12):
        assert not chunk.lstrip(" ").startswith("```")


# --- properties -------------------------------------------------------------------------

_FENCE_LINE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def fences_balanced(chunk: str) -> bool:
    """Independent CommonMark-ish fence scan: does the chunk end outside any code block?"""
    open_run: str | None = None
    for line in chunk.split("\n"):
        match = _FENCE_LINE.fullmatch(line)
        if match is None:
            continue
        run, info = match[1], match[2]
        if open_run is None:
            if not (run[0] == "`" and "`" in info):
                open_run = run
        elif run[0] == open_run[0] and len(run) >= len(open_run) and not info.strip():
            open_run = None
    return open_run is None


_word = st.text(alphabet="abcdefghij xyzé😀👍🏽\u0301", min_size=1, max_size=12)
_paragraph = st.lists(_word, min_size=1, max_size=30).map(" ".join)
_code_block = st.tuples(
    st.sampled_from(["```", "````", "~~~"]),
    st.sampled_from(["", "python", "js"]),
    st.lists(st.text(alphabet="abc =(){}\t😀", max_size=40), max_size=8),
).map(lambda t: f"{t[0]}{t[1]}\n" + "".join(line + "\n" for line in t[2]) + t[0])
_markdown = st.lists(st.one_of(_paragraph, _code_block), min_size=1, max_size=8).flatmap(
    lambda blocks: st.lists(
        st.sampled_from(["\n", "\n\n", "\n\n\n"]), min_size=len(blocks), max_size=len(blocks)
    ).map(lambda seps: "".join(b + s for b, s in zip(blocks, seps, strict=True)))
)
_length = st.sampled_from([len, utf16_len])


@settings(max_examples=300, deadline=None)
@given(text=_markdown, limit=st.integers(min_value=24, max_value=300), length=_length)
def test_property_markdown(text: str, limit: int, length: object) -> None:
    assert callable(length)
    parts = split_markdown_parts(text, limit=limit, length=length)
    assert "".join(p.body for p in parts) == text
    for part in parts:
        assert length(part.text) <= limit
        assert fences_balanced(part.text), part.text
    chunks = split_markdown(text, limit=limit, length=length)
    assert all(length(c) <= limit and fences_balanced(c) for c in chunks)
    # The tidy chunks only lose whitespace at their edges.
    squeeze = "".join
    assert squeeze("".join(c.split()) for c in chunks) == squeeze(
        "".join(p.text.split()) for p in parts
    )


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=600), limit=st.integers(min_value=8, max_value=120), length=_length)
def test_property_any_text(text: str, limit: int, length: object) -> None:
    assert callable(length)
    parts = split_markdown_parts(text, limit=limit, length=length)
    assert "".join(p.body for p in parts) == text
    assert all(length(p.text) <= limit for p in parts)
    assert all(p.body for p in parts)
