"""The docs' console picture: a real ``fanbot console`` session, as an SVG.

:func:`capture` runs ``fanbot console`` (its own private Redis, workers and the offline demo
model; a temporary state directory, none of the machine's settings) on a pseudo-terminal,
types a short conversation into it, and reads the screen through pyte, a VT100 emulator
that answers the cursor-position queries a terminal answers (without them the live area
is not drawn). Two moments are kept: the subagents running (the live area under the
prompt), and their announces. :func:`to_svg` renders lines with rich's SVG export (pure).
pyte and pexpect come with the ``docs`` extra (docs/development.md).
"""

from __future__ import annotations

import io
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from rich.console import Console
from rich.style import Style
from rich.text import Text

from bot.testing.stack import hermetic_env

COMMAND = "fanbot console"
QUESTION = "compare redis streams and kafka for an outbox"
COLUMNS, ROWS = 100, 36
SUBAGENT_SECONDS = 8  # FANBOT_DEMO_SUBAGENT_DELAY: long enough to list the runs while they run
TITLE = "fanbot console"
_FONT_URL = re.compile(r',\s*url\("https://[^"]+"\) format\("[a-z0-9]+"\)')
_COLORS = {"brown": "yellow", "default": None}


@dataclass(frozen=True)
class Cell:
    """One character cell of the screen: its text ("" right of a wide character) and
    pyte's attributes (``blink`` carries SGR 2, dim: see :func:`_keep_dim`)."""

    data: str
    fg: str = "default"
    bg: str = "default"
    bold: bool = False
    italics: bool = False
    underscore: bool = False
    reverse: bool = False
    blink: bool = False


def _color(name: str) -> str | None:
    if name in _COLORS:
        return _COLORS[name]
    if re.fullmatch(r"[0-9a-f]{6}", name):
        return "#" + name
    if name.startswith("bright"):
        return "bright_" + (_color(name[6:]) or "white")
    return name


def row_text(cells: Iterable[Any]) -> Text:
    """One screen row (pyte ``Char``s or :class:`Cell`s) as rich Text, a span per run of
    cells styled alike, trailing blanks cut."""
    text = Text()
    run, style = "", Style()
    for cell in cells:
        if cell.data == "":
            continue  # the right half of a wide character
        now = _style(cell)
        if now != style and run:
            text.append(run, style=style)
            run = ""
        run, style = run + cell.data, now
    text.append(run, style=style)
    text.rstrip()
    return text


def _style(cell: Any) -> Style:
    fg, bg = _color(cell.fg), _color(cell.bg)
    if cell.reverse:
        fg, bg = bg or "black", fg or "white"
    return Style(color=fg, bgcolor=bg, bold=cell.bold or None, italic=cell.italics or None,
                 underline=cell.underscore or None, dim=cell.blink or None)  # fmt: skip


def squeeze(lines: Sequence[Text]) -> list[Text]:
    """Runs of blank lines as one, none at the start or the end."""
    out: list[Text] = []
    for line in lines:
        if not line.plain.strip() and (not out or not out[-1].plain.strip()):
            continue
        out.append(line)
    while out and not out[-1].plain.strip():
        out.pop()
    return out


def to_svg(lines: Sequence[Text], *, width: int = COLUMNS, title: str = TITLE) -> str:
    """``lines`` as a terminal window in SVG (rich's export), fonts local only (the export's
    web-font addresses are dropped: the page fetches nothing)."""
    console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", emoji=False, highlight=False)  # fmt: skip
    for line in lines:
        console.print(line, overflow="crop", no_wrap=True, crop=True)
    return _FONT_URL.sub("", console.export_svg(title=title))


def _keep_dim(screen: Any) -> None:
    """pyte drops SGR 2 (dim); carry it as blink (SGR 5), which the console never uses."""
    select = screen.select_graphic_rendition

    def select_graphic_rendition(*attrs: int, **kwargs: Any) -> None:
        mapped: list[int] = []
        for attr in attrs:
            mapped += {2: [5], 22: [22, 25]}.get(attr, [attr])
        select(*mapped, **kwargs)

    screen.select_graphic_rendition = select_graphic_rendition


class _Tty:
    """``fanbot console`` on a pty, its output fed to an emulated screen."""

    def __init__(self, state: str) -> None:
        import pexpect
        import pyte

        env = hermetic_env({"state_dir": state})
        env.update(TERM="xterm-256color", FANBOT_DEMO_SUBAGENT_DELAY=str(SUBAGENT_SECONDS))
        self.child = pexpect.spawn(
            sys.executable,
            ["-c", "from bot.cli import main; main()", "console", "--workers", "3"],
            env=env,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(ROWS, COLUMNS),
            timeout=30,
        )
        self.screen = cast(Any, pyte.HistoryScreen(COLUMNS, ROWS, history=5000))
        self.screen.write_process_input = self.child.send  # answers cursor-position queries
        _keep_dim(self.screen)
        self.stream = pyte.Stream(self.screen)
        self._eof = pexpect.EOF
        self._timeout = pexpect.TIMEOUT

    def pump(self, seconds: float) -> bool:
        """Read for ``seconds``; False at end of output."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.stream.feed(self.child.read_nonblocking(1 << 16, timeout=0.05))
            except self._timeout:
                pass
            except self._eof:
                return False
            if time.monotonic() >= deadline:
                return True

    def rows(self) -> list[list[Any]]:
        """Every row so far: the scrolled-off history, then the screen."""
        width = range(COLUMNS)
        history = [[row[x] for x in width] for row in self.screen.history.top]
        return history + [[self.screen.buffer[y][x] for x in width] for y in range(ROWS)]

    def text(self) -> str:
        return "\n".join("".join(c.data for c in row) for row in self.rows())

    def wait_for(self, check: Callable[[str], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.text()):
            if not self.pump(0.2) or time.monotonic() > deadline:
                raise RuntimeError(f"the console did not show {what}:\n{self.text()[-2000:]}")

    def type(self, line: str) -> None:
        self.child.send(line + "\r")

    def close(self) -> None:
        self.child.sendeof()  # Ctrl-D: wait for every run, then exit
        deadline = time.monotonic() + 30
        while self.child.isalive() and time.monotonic() < deadline and self.pump(0.2):
            pass
        if self.child.isalive():
            self.child.terminate(force=True)


def capture() -> list[Text]:
    """Run the session; its lines: the screen while the subagents run (the live area at the
    bottom), a separator, then what the screen showed after that when they had announced."""
    with tempfile.TemporaryDirectory(prefix="fanbot-docs-console-") as state:
        tty = _Tty(state)
        try:
            tty.wait_for(lambda s: "type a message" in s, "its banner")
            tty.type(QUESTION)
            tty.wait_for(lambda s: "Started 3 subagents" in s and s.count("⏳") >= 3,
                         "three subagents running")  # fmt: skip
            tty.type("/subagents list")
            tty.wait_for(lambda s: "Subagents in this thread" in s, "the list")
            tty.pump(2)  # the live area's clocks tick
            running = tty.rows()
            prompt = len(tty.screen.history.top) + tty.screen.cursor.y
            tty.wait_for(lambda s: "All subagents are done" in s, "the combined answer")
            tty.pump(1)
            done = tty.rows()
        finally:
            tty.close()
    later = "… a few seconds later, the subagents announce:"
    return [
        *squeeze([row_text(r) for r in running]),
        Text(""),
        Text(later, style="dim italic"),
        *squeeze([row_text(r) for r in done[prompt:]]),
    ]
