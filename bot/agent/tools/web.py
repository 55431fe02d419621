"""The web tools: ``web_fetch`` (a public page as text) and ``web_search``.

``web_fetch`` is offered by default: it reaches public addresses only (see
:mod:`bot.agent.tools.ssrf`), within ``FANBOT_WEB__*`` bounds. ``web_search`` is offered
when ``FANBOT_SEARCH__PROVIDER`` is set. Both run in the worker's work horse, so they are
synchronous.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from bot.agent.tools import Tool
from bot.agent.tools.extract import readable
from bot.agent.tools.fetch import Fetched, Fetcher
from bot.agent.tools.search import Searcher, render
from bot.config import Settings

if TYPE_CHECKING:
    from bot.agent.context import ToolContext

DEFAULT_FETCH_CHARS = 20_000
DEFAULT_SEARCH_COUNT = 5
HEADER_ROOM = 1_000  # the URL/status/notes lines and the cut note


class WebFetchArgs(BaseModel):
    url: str = Field(min_length=1, max_length=8_000, description="The http(s) URL to read.")
    max_chars: int | None = Field(
        None,
        ge=100,
        le=1_000_000,
        description=f"Characters of the page's text to return (default {DEFAULT_FETCH_CHARS:,}; "
        "the server may allow fewer).",
    )
    start: int = Field(
        0, ge=0, description="Character offset to start at, to read a long page in parts."
    )


class WebSearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=400, description="What to search the web for.")
    count: int = Field(DEFAULT_SEARCH_COUNT, ge=1, le=20, description="How many results.")


def web_tools(
    settings: Settings, *, fetcher: Fetcher | None = None, searcher: Searcher | None = None
) -> list[Tool]:
    """The web tool family: ``web_fetch`` always, ``web_search`` when a provider is set.

    Args:
        settings: ``web`` and ``search`` sections are read.
        fetcher: Replaces the fetcher built from settings (tests: resolver, CAs).
        searcher: Replaces the searcher built from settings.
    """
    fetcher = fetcher or Fetcher.from_settings(settings.web)
    tools = [
        Tool(
            name="web_fetch",
            description="Read a public web page or document (HTML as markdown of its main "
            "content, PDF as text, text and JSON as they are). Private and local addresses "
            "are refused.",
            args=WebFetchArgs,
            run=partial(
                _web_fetch, fetcher, fetch_cap(settings), settings.web.parse_timeout_seconds
            ),
            repeat_safe=True,
            untrusted_output=True,
        )
    ]
    if settings.search.configured:
        searcher = searcher or Searcher.from_settings(settings.search)
        tools.append(
            Tool(
                name="web_search",
                description="Search the web; returns numbered results with title, URL and "
                "snippet. Read a result with web_fetch.",
                args=WebSearchArgs,
                run=partial(_web_search, searcher, settings.search.max_results),
                repeat_safe=True,
                untrusted_output=True,
            )
        )
    return tools


def fetch_cap(settings: Settings) -> int:
    """The most page text a call may ask for.

    Every tool result is also cut to ``subagents.max_result_chars`` by the loop; staying
    below it (with room for the header and the note) means a part is never cut twice and
    "call again with start=…" always points at the next unread character.
    """
    room = settings.subagents.max_result_chars - HEADER_ROOM
    return max(100, min(settings.web.max_chars, room))


def _web_fetch(
    fetcher: Fetcher, cap: int, parse_timeout: float, ctx: ToolContext, args: WebFetchArgs
) -> str:
    limit = min(args.max_chars or DEFAULT_FETCH_CHARS, cap)
    page = fetcher.fetch(args.url)
    kind, text = readable(
        page.body,
        content_type=page.content_type,
        charset=page.charset,
        url=page.url,
        complete=page.complete,
        budget=args.start + limit,
        timeout=parse_timeout,
    )
    return _header(page, kind) + "\n\n" + (_window(text.strip(), args.start, limit) or "(no text)")


def _header(page: Fetched, kind: str) -> str:
    mime = page.content_type.partition(";")[0].strip() or kind
    lines = [f"URL: {page.url}"]
    if page.redirects:
        lines[0] += f" (after {page.redirects} redirect{'s' if page.redirects > 1 else ''})"
    lines.append(f"Status: {page.status} · {mime} · {len(page.body):,} bytes")
    lines += [f"Note: {note}" for note in page.notes]
    return "\n".join(lines)


def _window(text: str, start: int, limit: int) -> str:
    """``limit`` characters of ``text`` from ``start``, saying where they are when that is
    not the whole text."""
    total = len(text)
    if start and start >= total:
        return f"(nothing from character {start:,}: the text has {total:,} characters)"
    end = min(total, start + limit)
    if start == 0 and end == total:
        return text
    rest = f"; call again with start={end} for more" if end < total else ""
    return f"{text[start:end]}\n[… characters {start:,}–{end:,} of {total:,}{rest}]"


def _web_search(searcher: Searcher, cap: int, ctx: ToolContext, args: WebSearchArgs) -> str:
    count = min(args.count, cap)
    return render(args.query, searcher.search(args.query, count), searcher.provider)
