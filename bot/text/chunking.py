"""Split markdown into message-sized chunks without breaking code fences (pure).

Platforms cap message length (Telegram: 4096 UTF-16 code units; Slack: 40k characters,
less for readable blocks). :func:`split_markdown` cuts where a reader would: paragraph
breaks, then line breaks, then spaces, and only then anywhere — but never inside a
surrogate pair or a combining sequence. A cut inside a fenced code block closes the fence
at the end of the chunk and reopens it (same info string) at the start of the next, so
every chunk renders on its own.

Cut preference, rightmost first within each tier:

1. paragraph break outside a code block,
2. line break outside a code block (so a whole block moves to the next chunk),
3. line break inside a code block,
4. space outside, then space inside a code block,
5. hard cut at a grapheme-ish boundary.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Chunk", "split_markdown", "split_markdown_parts", "utf16_len"]

Length = Callable[[str], int]

_OPEN_RE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_CLOSE_RE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t\r]*")
_ZWJ = "\u200d"


def utf16_len(s: str) -> int:
    """Length in UTF-16 code units, the way Telegram counts message length."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """One piece of a split text.

    Attributes:
        body: The exact slice of the input; the bodies concatenate back to the input.
        reopen: Fence opener line (with newline) repeated because the body starts
            inside a code block.
        close: Fence closer added because the body ends inside a code block.
    """

    body: str
    reopen: str = ""
    close: str = ""

    @property
    def text(self) -> str:
        """What to send: ``reopen + body + close``."""
        return self.reopen + self.body + self.close


@dataclass(frozen=True, kw_only=True)
class _Fence:
    opener: str
    marker: str


@dataclass(frozen=True, kw_only=True)
class _Line:
    start: int
    end: int  # exclusive, after the "\n" if any
    kind: str  # text | open | code | close
    fence: _Fence | None  # the block a non-text line belongs to


_FORBIDDEN = _Fence(opener="", marker="")  # a position inside a fence delimiter line


def _opener(line: str) -> _Fence | None:
    match = _OPEN_RE.fullmatch(line)
    if match is None or (match[1][0] == "`" and "`" in match[2]):
        return None
    return _Fence(opener=line, marker=match[1])


def _closes(line: str, fence: _Fence) -> bool:
    match = _CLOSE_RE.fullmatch(line)
    return (
        match is not None and match[1][0] == fence.marker[0] and len(match[1]) >= len(fence.marker)
    )


class _Doc:
    """The input's lines, classified once, with fence state lookups by offset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines: list[_Line] = []
        fence: _Fence | None = None
        start = 0
        while start < len(text):
            newline = text.find("\n", start)
            end = len(text) if newline < 0 else newline + 1
            content = text[start:end].removesuffix("\n")
            if fence is None:
                fence = _opener(content)
                kind, owner = ("open", fence) if fence else ("text", None)
            elif _closes(content, fence):
                kind, owner, fence = "close", fence, None
            else:
                kind, owner = "code", fence
            self.lines.append(_Line(start=start, end=end, kind=kind, fence=owner))
            start = end
        self.starts = [line.start for line in self.lines]

    def line_at(self, pos: int) -> _Line:
        return self.lines[bisect.bisect_right(self.starts, pos) - 1]

    def state_at(self, pos: int) -> _Fence | None:
        """The fence still open after ``text[:pos]``; ``_FORBIDDEN`` inside a delimiter."""
        if pos == 0 or not self.lines:
            return None
        if pos >= len(self.text) or pos == self.line_at(pos).start:
            before = self.line_at(pos - 1)
            return before.fence if before.kind in ("open", "code") else None
        line = self.line_at(pos)
        if line.kind in ("open", "close"):
            return _FORBIDDEN
        return line.fence if line.kind == "code" else None

    def mid_line_ok(self, chunk_start: int, pos: int) -> bool:
        """A cut inside a line must not turn either half into a fence delimiter."""
        line = self.line_at(pos)
        if pos == line.start or pos >= len(self.text):
            return True
        head = self.text[max(line.start, chunk_start) : pos]
        tail = self.text[pos : line.end].removesuffix("\n")
        if line.kind == "code" and line.fence is not None:
            return not (_closes(head, line.fence) or _closes(tail, line.fence))
        return _opener(head) is None and _opener(tail) is None

    def grapheme_ok(self, pos: int) -> bool:
        """Approximate grapheme-cluster boundary: keep marks, joiners, pairs together."""
        text = self.text
        if pos <= 0 or pos >= len(text):
            return True
        a, b = text[pos - 1], text[pos]
        if (a, b) == ("\r", "\n") or _ZWJ in (a, b):
            return False
        if unicodedata.category(b) in ("Mn", "Me", "Mc", "Sk") and not b.isascii():
            return False
        if "\U000e0020" <= b <= "\U000e007f":  # emoji tag sequences
            return False
        if "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff":
            return False
        if not _regional(b):
            return True
        # Flags are pairs of regional indicators: cut only after an even run of them.
        run = 0
        while pos - run - 1 >= 0 and _regional(text[pos - run - 1]):
            run += 1
        return run % 2 == 0


def _regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


class _Cutter:
    """Finds the best end of the chunk that starts at ``pos``."""

    def __init__(
        self, doc: _Doc, pos: int, *, reopen: str, limit: int, length: Length, fences: bool
    ) -> None:
        self.doc, self.pos, self.reopen, self.fences = doc, pos, reopen, fences
        self.limit, self.length = limit, length

    def closer(self, end: int) -> str:
        fence = self.doc.state_at(end)
        if not self.fences or fence is None or fence is _FORBIDDEN:
            return ""
        return ("" if self.doc.text[end - 1] == "\n" else "\n") + fence.marker

    def fits(self, end: int) -> bool:
        body = self.doc.text[self.pos : end]
        return self.length(self.reopen + body + self.closer(end)) <= self.limit

    def hard_max(self) -> int:
        """Largest end whose body (with the reopen line) fits, ignoring any closer."""
        lo, hi = self.pos, len(self.doc.text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.length(self.reopen + self.doc.text[self.pos : mid]) <= self.limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def after(self, sep: str, hi: int) -> Iterator[int]:
        """Ends just after each ``sep`` in the window, rightmost first."""
        i = self.doc.text.rfind(sep, self.pos, hi)
        while i >= 0:
            yield i + len(sep)
            i = self.doc.text.rfind(sep, self.pos, i + len(sep) - 1)

    def find(self) -> int | None:
        text, doc = self.doc.text, self.doc
        if self.fits(len(text)):
            return len(text)
        hi = self.hard_max()
        if hi <= self.pos:
            return None

        def inside(end: int) -> bool:
            state = doc.state_at(end)
            return state is not None and state is not _FORBIDDEN

        def after_opener(end: int) -> bool:
            return doc.line_at(end - 1).kind == "open"

        def mid_ok(end: int) -> bool:
            return doc.state_at(end) is not _FORBIDDEN and doc.mid_line_ok(self.pos, end)

        tiers: list[tuple[str, Callable[[int], bool]]] = [
            ("\n\n", lambda e: doc.state_at(e) is None),
            ("\n", lambda e: doc.state_at(e) is None),
            ("\n", lambda e: inside(e) and not after_opener(e)),
            (" ", lambda e: doc.state_at(e) is None and mid_ok(e)),
            (" ", lambda e: inside(e) and mid_ok(e)),
        ]
        for sep, allowed in tiers:
            for end in self.after(sep, hi):
                if allowed(end) and self.fits(end):
                    return end
        for end in range(hi, self.pos, -1):
            if doc.grapheme_ok(end) and mid_ok(end) and self.fits(end):
                return end
        # Degenerate input (e.g. one delimiter line longer than the limit): any fitting cut.
        return next((end for end in range(hi, self.pos, -1) if self.fits(end)), None)


def split_markdown_parts(text: str, *, limit: int, length: Length = len) -> list[Chunk]:
    """Split ``text`` into :class:`Chunk` parts whose ``text`` satisfies ``length <= limit``.

    Args:
        text: Markdown.
        limit: Maximum ``length(chunk.text)``.
        length: How the platform measures a message (``len``, :func:`utf16_len`...).

    Raises:
        ValueError: ``limit`` is too small to make progress (not even one character fits).
    """
    doc = _Doc(text)
    parts: list[Chunk] = []
    pos = 0
    while pos < len(text):
        fence = doc.state_at(pos)
        attempts = [("", True)]
        if fence is not None and fence is not _FORBIDDEN:
            # Fall back to a bare fence when the info string leaves no room.
            attempts = [(fence.opener + "\n", True), (fence.marker + "\n", True)]
        # Last resort for absurd fence lines (longer than the limit): ignore fences.
        attempts.append(("", False))
        for reopen, fences in attempts:
            cutter = _Cutter(doc, pos, reopen=reopen, limit=limit, length=length, fences=fences)
            end = cutter.find()
            if end is not None:
                break
        else:
            raise ValueError(f"limit {limit} is too small to split this text")
        parts.append(Chunk(body=text[pos:end], reopen=reopen, close=cutter.closer(end)))
        pos = end
    return parts


def split_markdown(text: str, *, limit: int, length: Length = len) -> list[str]:
    """Split markdown into chunks of at most ``limit`` (as measured by ``length``).

    Chunk edges are tidied (leading blank lines and trailing whitespace dropped, since
    platforms trim them anyway) and whitespace-only chunks are omitted; use
    :func:`split_markdown_parts` for the exact, lossless parts.

    Args:
        text: Markdown.
        limit: Maximum length of each chunk.
        length: How the platform measures a message; pass :func:`utf16_len` for Telegram.

    Returns:
        The chunks in order; ``[]`` for blank text.
    """
    chunks = (
        part.text.lstrip("\n").rstrip()
        for part in split_markdown_parts(text, limit=limit, length=length)
    )
    return [chunk for chunk in chunks if chunk]
