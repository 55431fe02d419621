"""Markdown -> terminal text with rich (pure: text in, ANSI text out; no terminal I/O).

Chat markdown differs from documents in one way that matters here: a newline is a line
break (Slack, Telegram and Matrix clients all show it so), so the announce's ``Status:``,
``Result:`` … lines stay lines instead of being joined into one paragraph.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import ClassVar

from markdown_it.token import Token
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Heading, Markdown, MarkdownElement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from adapters.console.convert import thread_prefix
from bot.types import Outbound, OutboundKind

REPLY_LABEL = "fanbot ›"
_TRAILING_BLANKS = re.compile(r"(?:\s|\x1b\[[0-9;]*m)+$")


class _LeftHeading(Heading):
    """Headings left-aligned and unboxed: a chat reply is not a document title page."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.text.justify = "left"
        yield self.text


def _hard_breaks(tokens: Iterable[Token]) -> None:
    for token in tokens:
        if token.type == "softbreak":
            token.type = "hardbreak"
        if token.children:
            _hard_breaks(token.children)


class ChatMarkdown(Markdown):
    """rich's Markdown with chat line breaks, plain headings and no OSC-8 hyperlinks
    (links show their address, which every terminal can display and copy)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "heading_open": _LeftHeading,
    }

    def __init__(self, markup: str) -> None:
        super().__init__(markup, hyperlinks=False)
        _hard_breaks(self.parsed)


def announce_parts(text: str) -> tuple[str, str, str, str]:
    """An announce (the template in :mod:`bot.runs.render`) as header, markdown body
    (status and result), notes and stats line. Notes and stats are split off as text: in
    markdown a result ending in a list would swallow them as a lazy continuation line."""
    header, *rest = text.split("\n")
    stats = rest.pop() if rest and rest[-1].startswith("runtime ") else ""
    at = next((i for i in range(len(rest) - 1, 0, -1) if rest[i].startswith("Notes: ")), None)
    notes = "\n".join(rest[at:]) if at is not None else ""
    body = "\n".join(rest[:at] if at is not None else rest)
    return header, body, notes, stats


def _announce(text: str, prefix: str) -> RenderableType:
    header, body, notes, stats = announce_parts(text)
    parts: list[RenderableType] = [Text(""), Text(prefix + header, style="bold")]
    if body.strip():
        parts.append(Padding(ChatMarkdown(body), (0, 0, 0, 2)))
    if notes:
        parts.append(Padding(Text(notes), (0, 0, 0, 2)))
    if stats:
        parts.append(Padding(Text(stats, style="dim"), (0, 0, 0, 2)))
    return Group(*parts)


def renderable(message: Outbound, *, show_thread: bool) -> RenderableType:
    """How one message looks: replies beside ``fanbot ›``, announces as a bold header over
    an indented body."""
    prefix = thread_prefix(message.thread.thread, show_thread=show_thread)
    if message.kind is OutboundKind.ANNOUNCE:
        return _announce(message.text, prefix)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="bold cyan")
    grid.add_column(overflow="fold")
    grid.add_row(Text(prefix + REPLY_LABEL), ChatMarkdown(message.text))
    return grid


def to_ansi(item: RenderableType, *, width: int, color: bool = True) -> str:
    """``item`` rendered for a terminal ``width`` columns wide, without the trailing blanks
    rich pads lines with (they would wrap into empty lines when the window narrows) and
    without a trailing newline."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(20, width),
        force_terminal=color,
        no_color=not color,
        color_system="auto" if color else None,
        emoji=False,  # ``:thread`` and ``:smile:`` are text here, not emoji codes
        highlight=False,
    )
    console.print(item)
    lines = [_TRAILING_BLANKS.sub("", line) for line in buffer.getvalue().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    reset = "\x1b[0m" if color else ""
    return "\n".join(line + reset if "\x1b" in line else line for line in lines)
