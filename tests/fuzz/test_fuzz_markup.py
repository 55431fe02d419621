"""Fuzzing markdown -> platform markup and chunking, for Slack, Telegram and Matrix.

The markdown is what models write: words wrapped in every construct the converters handle
(emphasis, code, links, images, headings, lists, quotes, tables, fences, raw HTML), plus
arbitrary text. Properties, per platform, with its real limit:

* nothing raises;
* every part fits the platform's limit as the platform counts it (Slack: characters of
  mrkdwn; Telegram: UTF-16 units of the visible text, and of the plain-text fallback;
  Matrix: characters of ``body``, and the event under the homeserver's 64 KiB);
* nothing is lost by chunking: the non-whitespace characters of the whole text appear, in
  order, in the concatenated parts (parts may add fence lines, so: a subsequence);
* nothing is lost by conversion: every word of the markdown is visible in what a reader
  sees, or is the target of a link they can follow.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from adapters.matrix.convert import message_content
from adapters.matrix.markup import render_chunks
from adapters.slack import markup as slack
from adapters.telegram.markup import MAX_MESSAGE, render_parts
from bot.config import MatrixSettings, SlackSettings
from bot.testing.telegram_html import visible_text
from bot.text.chunking import split_markdown, utf16_len
from tests.fuzz import fuzz_settings

FUZZ = fuzz_settings()

SLACK_LIMIT = SlackSettings().max_message_chars
MATRIX_LIMIT = MatrixSettings().max_message_chars
MATRIX_EVENT_BYTES = 65_536
"""The spec's limit for a whole event; the content must leave room for the envelope."""

word = st.from_regex(r"[a-z]{2,7}[0-9]", fullmatch=True)
TEMPLATES = (
    "{w}",
    "**{w}**",
    "_{w}_",
    "~~{w}~~",
    "`{w}`",
    "`<{w}>`",
    "[{w}](https://e.com/{w})",
    "[](https://e.com/{w})",
    "![{w}](https://e.com/{w}.png)",
    "![](https://e.com/{w}.png)",
    "<https://e.com/{w}>",
    "<{w}>",
    "</{w}>",
    "<b>{w}</b>",
    "{w} & <",
    "\\*{w}\\*",
    "{w}  \n",
)
BLOCKS = (
    "# {w}",
    "- {w}\n- {w}",
    "1. {w}\n2. {w}",
    "> {w}",
    "```py\n{w} < {w}\n```",
    "~~~\n{w}\n~~~",
    "    {w}",
    "| {w} | {w} |\n|---|---|\n| {w} | {w} |",
    "<div>\n{w}\n</div>",
    "<!-- {w} -->",
    "---",
)


@st.composite
def markdown(draw: st.DrawFn) -> tuple[str, list[str]]:
    """Model-like markdown, and the words it contains."""
    words: list[str] = []
    blocks: list[str] = []
    for _ in range(draw(st.integers(1, 16))):
        if draw(st.booleans()):
            template = draw(st.sampled_from(BLOCKS))
        else:
            template = " ".join(draw(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=8)))
        filled = re.sub(r"\{w\}", lambda _: words.append(draw(word)) or words[-1], template)
        blocks.append(filled)
    # Blocks stand on their own lines: "~~~ # x" would make "# x" a fence's info string.
    joiners = draw(
        st.lists(st.sampled_from(["\n", "\n\n"]), min_size=len(blocks), max_size=len(blocks))
    )
    return "".join(b + j for b, j in zip(blocks, joiners, strict=True)), words


long_markdown = st.tuples(markdown(), st.integers(2, 12)).map(lambda t: (t[0][0] * t[1], t[0][1]))
any_text = st.text(max_size=3000)


def squeezed(text: str) -> str:
    return "".join(text.split())


def is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(char in it for char in needle)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v or "" for k, v in attrs if k == "href"]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def seen(html_text: str) -> tuple[str, str]:
    """(visible text, link targets) of an HTML fragment."""
    parser = _Links()
    parser.feed(html_text)
    parser.close()
    return "".join(parser.text), " ".join(parser.hrefs)


def assert_words_shown(words: list[str], visible: str, targets: str) -> None:
    missing = [w for w in words if w not in visible and w not in targets]
    assert not missing, f"lost {missing[:5]}"


# -- Slack -----------------------------------------------------------------------------------


def _slack(text: str, limit: int) -> tuple[str, list[str]]:
    mrkdwn = slack.to_mrkdwn(text)
    parts = slack.split(mrkdwn, limit)
    assert all(0 < len(p) <= limit for p in parts)
    assert is_subsequence(squeezed(mrkdwn), squeezed("".join(parts)))
    return mrkdwn, parts


@FUZZ
@given(md=st.one_of(markdown(), long_markdown), limit=st.sampled_from([100, 333, SLACK_LIMIT]))
def test_slack_markup(md: tuple[str, list[str]], limit: int) -> None:
    text, words = md
    mrkdwn, _ = _slack(text, limit)
    assert_words_shown(words, html.unescape(mrkdwn), "")


@FUZZ
@given(text=any_text, limit=st.sampled_from([100, 777, SLACK_LIMIT]))
def test_slack_markup_any_text(text: str, limit: int) -> None:
    _slack(text, limit)


# -- Telegram --------------------------------------------------------------------------------


def _telegram(text: str, limit: int) -> tuple[str, str]:
    parts = render_parts(text, limit=limit)
    shown, targets = [], []
    for part in parts:
        visible = visible_text(part.html)  # Telegram's own parser accepts it
        assert utf16_len(visible) <= limit
        assert utf16_len(part.source) <= limit  # the plain-text fallback fits too
        shown.append(visible)
        targets.append(seen(part.html)[1])
    sources = "".join(p.source for p in parts)
    kept = squeezed("".join(split_markdown(text, limit=limit, length=utf16_len)))
    assert is_subsequence(squeezed(text), kept), "the splitter lost text"
    assert is_subsequence(kept, squeezed(sources)) or not parts
    return "\n".join(shown), " ".join(targets)


@FUZZ
@given(md=st.one_of(markdown(), long_markdown), limit=st.sampled_from([64, 500, MAX_MESSAGE]))
def test_telegram_markup(md: tuple[str, list[str]], limit: int) -> None:
    text, words = md
    visible, targets = _telegram(text, limit)
    assert_words_shown(words, visible, targets)


@FUZZ
@given(text=any_text, limit=st.sampled_from([64, 999, MAX_MESSAGE]))
def test_telegram_markup_any_text(text: str, limit: int) -> None:
    _telegram(text, limit)


# -- Matrix ----------------------------------------------------------------------------------


def _matrix(text: str, limit: int) -> tuple[str, str]:
    parts = render_chunks(text, limit=limit, chunker=split_markdown)
    assert parts
    shown, targets = [], []
    for part in parts:
        assert 0 < len(part.body) <= max(limit, len("(empty)"))
        content = message_content(
            body=part.body, html=part.html, msgtype="m.text", thread="$t", latest="$l"
        )
        size = len(json.dumps(content, ensure_ascii=False).encode())
        assert size < MATRIX_EVENT_BYTES - 2_000, f"event content of {size} bytes"
        visible, hrefs = seen(part.html) if part.html is not None else (part.body, "")
        shown.append(visible)
        targets.append(hrefs)
    assert is_subsequence(squeezed(text), squeezed("".join(p.body for p in parts)))
    return "\n".join(shown), " ".join(targets)


@FUZZ
@given(md=st.one_of(markdown(), long_markdown), limit=st.sampled_from([100, 1000, MATRIX_LIMIT]))
def test_matrix_markup(md: tuple[str, list[str]], limit: int) -> None:
    text, words = md
    visible, targets = _matrix(text, limit)
    assert_words_shown(words, visible, targets)


@FUZZ
@given(text=any_text, limit=st.sampled_from([100, 999, MATRIX_LIMIT]))
def test_matrix_markup_any_text(text: str, limit: int) -> None:
    _matrix(text, limit)


@FUZZ
@given(
    unit=st.sampled_from(["🙂", "&", '"', "<", "\\", "é", "中", "a\n"]),
    limit=st.sampled_from([MATRIX_LIMIT, 30_000]),
)
def test_matrix_events_stay_under_the_size_limit(unit: str, limit: int) -> None:
    _matrix(unit * (limit + 7), limit)
