"""The interactive terminal (I/O): a prompt-toolkit prompt and output printed above it.

prompt-toolkit reads the terminal in raw mode, so a paste of any length arrives whole (the
tty's canonical mode cuts a line at 4,095 characters) and a bracketed paste with newlines
stays one message. It gives line editing, a history kept in the state directory, and a
bottom toolbar, which here is the live area: runs in flight with elapsed times that tick
every second.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.styles import Style

IDLE_HINT = (
    "Enter: send · Alt-Enter: new line · /help · :thread NAME · Ctrl-D: finish · Ctrl-C: quit"
)
_STYLE = Style.from_dict(
    {
        "prompt": "bold",
        "bottom-toolbar": "noreverse",
        "bottom-toolbar.live": "fg:ansiyellow",
        "bottom-toolbar.hint": "fg:ansibrightblack",
    }
)


class Interrupted(Exception):
    """Ctrl-C at the prompt."""


def _bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return keys


class Terminal:
    """Prompt for messages; print above the prompt.

    Args:
        history: File for the input history (``None``: this session only).
        live: Returns the live area's lines (called on every redraw, at least each second).
    """

    def __init__(self, *, history: Path | None, live: Callable[[], list[str]]) -> None:
        self._live = live
        self._session: PromptSession[str] = PromptSession(
            history=FileHistory(str(history)) if history else InMemoryHistory(),
            bottom_toolbar=self._toolbar,
            refresh_interval=1.0,
            key_bindings=_bindings(),
            style=_STYLE,
        )

    @property
    def width(self) -> int:
        """The terminal's width now (asked of the tty, so a resized window is followed)."""
        try:
            return self._session.output.get_size().columns
        except OSError:
            return shutil.get_terminal_size((100, 24)).columns

    def _toolbar(self) -> FormattedText:
        lines = self._live()
        if not lines:
            return FormattedText([("class:bottom-toolbar.hint", IDLE_HINT)])
        return FormattedText([("class:bottom-toolbar.live", "\n".join(lines))])

    async def read(self, prompt: str) -> str | None:
        """The next message typed; ``None`` at Ctrl-D.

        Raises:
            Interrupted: Ctrl-C was pressed.
        """
        try:
            # handle_sigint=False: the console's own SIGINT handler stays installed (the
            # prompt would replace it, then remove it for good when it returns).
            return await self._session.prompt_async(
                FormattedText([("class:prompt", prompt)]), handle_sigint=False
            )
        except EOFError:
            return None
        except KeyboardInterrupt:
            raise Interrupted from None

    async def write(self, text: str) -> None:
        """Print ``text`` (may hold ANSI styles) above the prompt, or plainly when no prompt
        is showing."""
        app = self._session.app
        if not app.is_running:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            return
        # What prompt-toolkit's run_in_terminal does, minus its switch to cooked mode for
        # the duration: keys typed meanwhile stay raw input for the prompt (in cooked mode
        # the tty echoes them into the output, and swallows a Ctrl-D).
        app.renderer.erase()
        app.output.write_raw(text + "\n")
        app.output.flush()
        app.renderer.request_absolute_cursor_position()
        app.invalidate()
