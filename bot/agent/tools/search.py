"""``web_search`` providers: SearXNG, Brave and Tavily.

Each provider is a request builder and a parser of its real JSON answer into :class:`Hit`s,
so adding one is two small functions. The endpoint is the operator's choice (not the
model's), so it is not held to the public-address policy of ``web_fetch``: a self-hosted
SearXNG usually lives on the intranet.

Wire formats: SearXNG ``GET /search?q=…&format=json`` (JSON output must be enabled in its
``settings.yml``) → ``{"results": [{"title", "url", "content"}]}``; Brave
``GET /res/v1/web/search?q=…&count=…`` with ``X-Subscription-Token`` →
``{"web": {"results": [{"title", "url", "description"}]}}`` (snippets carry ``<strong>``);
Tavily ``POST /search`` with ``Authorization: Bearer <key>`` and
``{"query", "max_results", "search_depth"}`` → ``{"results": [{"title", "url", "content"}]}``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bot.config import SearchSettings
from bot.errors import ToolError

MAX_ANSWER_BYTES = 2_000_000  # a results page is a few kB; more is a broken endpoint
SNIPPET_CHARS = 400
_TAG = re.compile(r"<[^>]{0,200}>")

DEFAULT_URLS = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}


@dataclass(frozen=True, kw_only=True)
class Hit:
    """One search result."""

    title: str
    url: str
    snippet: str


@dataclass(frozen=True, kw_only=True)
class Searcher:
    """Asks the configured provider.

    Attributes:
        provider: ``searxng``, ``brave`` or ``tavily``.
        base_url: The instance or API base (no trailing slash needed).
        api_key: The provider's key (SearXNG needs none).
        timeout_seconds: The whole request.
    """

    provider: str
    base_url: str
    api_key: str | None = None
    timeout_seconds: float = 15.0

    @classmethod
    def from_settings(cls, search: SearchSettings) -> Searcher:
        provider = search.provider or "searxng"
        return cls(
            provider=provider,
            base_url=search.url or DEFAULT_URLS.get(provider, ""),
            api_key=search.api_key.get_secret_value() if search.api_key else None,
            timeout_seconds=search.timeout_seconds,
        )

    def search(self, query: str, count: int) -> list[Hit]:
        """Up to ``count`` hits for ``query``; :class:`ToolError` with a short reason."""
        build, parse = _PROVIDERS[self.provider]
        try:
            with httpx.Client(timeout=self.timeout_seconds) as client:
                request = build(client, self, query, count)
                response = client.send(request, stream=True)
                try:
                    _check_status(response, self.provider)
                    data = json.loads(_bounded_body(response))
                finally:
                    response.close()
        except httpx.TimeoutException:
            raise ToolError(
                f"{self.provider} did not answer within {self.timeout_seconds:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise ToolError(f"{self.provider} search failed: {type(exc).__name__}: {exc}") from None
        except ValueError:
            raise ToolError(f"{self.provider} answered with something other than JSON") from None
        return parse(data)[:count]

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path


def _check_status(response: httpx.Response, provider: str) -> None:
    status = response.status_code
    if status < 400:
        return
    if status in (401, 403):
        hint = " (is JSON output enabled in its settings.yml?)" if provider == "searxng" else ""
        raise ToolError(f"{provider} refused the request (HTTP {status}){hint}")
    if status == 429:
        raise ToolError(f"{provider} is rate limiting searches (HTTP 429); try again later")
    raise ToolError(f"{provider} search failed (HTTP {status})")


def _bounded_body(response: httpx.Response) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise ToolError(f"the search answer is larger than {MAX_ANSWER_BYTES:,} bytes")
    return bytes(body)


def _searxng(client: httpx.Client, s: Searcher, query: str, count: int) -> httpx.Request:
    return client.build_request("GET", s.url("/search"), params={"q": query, "format": "json"})


def _brave(client: httpx.Client, s: Searcher, query: str, count: int) -> httpx.Request:
    headers = {"Accept": "application/json", "X-Subscription-Token": s.api_key or ""}
    params = {"q": query, "count": str(min(count, 20))}
    return client.build_request("GET", s.url("/res/v1/web/search"), params=params, headers=headers)


def _tavily(client: httpx.Client, s: Searcher, query: str, count: int) -> httpx.Request:
    body = {"query": query, "max_results": min(count, 20), "search_depth": "basic"}
    headers = {"Authorization": f"Bearer {s.api_key or ''}"}
    return client.build_request("POST", s.url("/search"), json=body, headers=headers)


def _hits(items: Any, snippet_key: str) -> list[Hit]:
    """Hits from a list of result objects; malformed entries are skipped, not fatal."""
    if not isinstance(items, list):
        return []
    hits = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            title, snippet = item.get("title"), item.get(snippet_key)
            hits.append(
                Hit(
                    title=clean(title if isinstance(title, str) else "") or "(untitled)",
                    url=item["url"],
                    snippet=clean(snippet if isinstance(snippet, str) else ""),
                )
            )
    return hits


def clean(text: str, limit: int = SNIPPET_CHARS) -> str:
    """``text`` without markup, entities or runs of whitespace, cut to ``limit``."""
    flat = " ".join(html.unescape(_TAG.sub("", text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _parse_searxng(data: Any) -> list[Hit]:
    return _hits(data.get("results") if isinstance(data, dict) else None, "content")


def _parse_brave(data: Any) -> list[Hit]:
    web = data.get("web") if isinstance(data, dict) else None
    return _hits(web.get("results") if isinstance(web, dict) else None, "description")


def _parse_tavily(data: Any) -> list[Hit]:
    return _hits(data.get("results") if isinstance(data, dict) else None, "content")


Build = Callable[[httpx.Client, Searcher, str, int], httpx.Request]
_PROVIDERS: dict[str, tuple[Build, Callable[[Any], list[Hit]]]] = {
    "searxng": (_searxng, _parse_searxng),
    "brave": (_brave, _parse_brave),
    "tavily": (_tavily, _parse_tavily),
}


def render(query: str, hits: list[Hit], provider: str) -> str:
    """Numbered results, as the model reads them."""
    if not hits:
        return f"no results for {query!r} ({provider})"
    lines = [f"Results for {query!r} ({provider}):"]
    for number, hit in enumerate(hits, 1):
        lines += ["", f"{number}. {clean(hit.title, 200)}", f"   {hit.url[:500]}"]
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)
