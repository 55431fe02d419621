"""Recognize a command at the start of a message (pure).

Adapters normalize platform syntax first (``/subagents@Bot``, ``!subagents``), so here a
command is ``/name`` followed by whitespace-separated arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.commands.registry import NAMES

MAX_ARGS_CHARS = 8_000
_WORD = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    args: tuple[str, ...] = ()
    rest: str = ""
    """Everything after the name, unsplit (``/subagents send 1 hello world``)."""

    @property
    def known(self) -> bool:
        return self.name in NAMES

    @property
    def is_word(self) -> bool:
        """The name is one word (``/foo``): a command, known or not, never text for the
        model. ``/usr/bin …`` or ``/r/python …`` are text."""
        return _WORD.fullmatch(self.name) is not None


def parse_command(text: str) -> Command | None:
    """``/subagents list`` -> Command("subagents", ("list",)); plain text -> None.

    Any whitespace ends the name (a tab, a newline, the non-breaking space some clients
    send), the same whitespace :meth:`str.split` uses for the arguments.
    """
    stripped = text.lstrip()
    if not stripped.startswith("/") or len(stripped) < 2 or not stripped[1].isalpha():
        return None
    head, *tail = stripped[1:].split(None, 1)
    rest = tail[0].strip()[:MAX_ARGS_CHARS] if tail else ""
    return Command(name=head.lower(), args=tuple(rest.split()), rest=rest)
