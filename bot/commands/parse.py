"""Recognize a command at the start of a message (pure).

Adapters normalize platform syntax first (``/subagents@Bot``, ``!subagents``), so here a
command is ``/name`` followed by whitespace-separated arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

KNOWN = ("subagents", "stop", "help")
MAX_ARGS_CHARS = 8_000


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    args: tuple[str, ...] = ()
    rest: str = ""
    """Everything after the name, unsplit (``/subagents send 1 hello world``)."""

    @property
    def known(self) -> bool:
        return self.name in KNOWN


def parse_command(text: str) -> Command | None:
    """``/subagents list`` -> Command("subagents", ("list",)); plain text -> None."""
    stripped = text.lstrip()
    if not stripped.startswith("/") or len(stripped) < 2 or not stripped[1].isalpha():
        return None
    head, _, rest = stripped[1:].partition(" ")
    head, _, tail = head.partition("\n")
    rest = (tail + " " + rest).strip() if tail else rest.strip()
    rest = rest[:MAX_ARGS_CHARS]
    return Command(name=head.lower(), args=tuple(rest.split()), rest=rest)
