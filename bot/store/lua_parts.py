"""Pieces of Lua scripts that span owners: each owner writes its own structures.

An atomic script over the structures of several owners (the finalize script,
:mod:`bot.store.finalize_script`) is not written as one block of Lua that knows every
owner's keys. Each owner module provides a :class:`Fragment`, a Lua function
``local function <name>(k, a)`` over its own keys ``k`` and arguments ``a`` (Lua tables),
and a function that makes the :class:`Part` of one call (those keys and arguments). The
script's one assembler lays the parts out in ``KEYS``/``ARGV`` (:func:`call`) and writes the
body that calls them in order.
"""

from __future__ import annotations

from dataclasses import dataclass

Arg = str | int | float


@dataclass(frozen=True, kw_only=True)
class Fragment:
    """One owner's Lua function for a script that spans owners.

    Attributes:
        name: The Lua function ``lua`` defines.
        lua: ``local function <name>(k, a) ... end`` (plus any helpers it needs).
        keys: How many keys it takes (``k[1]`` ...); ``""`` is passed for an unused one.
        args: How many arguments it takes (``a[1]`` ...).
    """

    name: str
    lua: str
    keys: int
    args: int


@dataclass(frozen=True, kw_only=True)
class Part:
    """One fragment's keys and arguments for one call of the script."""

    fragment: Fragment
    keys: tuple[str, ...]
    args: tuple[Arg, ...]

    def __post_init__(self) -> None:
        if len(self.keys) != self.fragment.keys or len(self.args) != self.fragment.args:
            raise ValueError(
                f"{self.fragment.name} takes {self.fragment.keys} keys and "
                f"{self.fragment.args} args, got {len(self.keys)} and {len(self.args)}"
            )


def call(fragment: Fragment, *, key_at: int, arg_at: int, extra: str = "") -> str:
    """The Lua call of ``fragment`` with its keys from ``KEYS[key_at]`` and its arguments
    from ``ARGV[arg_at]`` on (1-based, as Lua counts); ``extra``: more Lua arguments, values
    an earlier step returned."""
    keys = ", ".join(f"KEYS[{key_at + i}]" for i in range(fragment.keys))
    args = ", ".join(f"ARGV[{arg_at + i}]" for i in range(fragment.args))
    more = f", {extra}" if extra else ""
    return f"{fragment.name}({{{keys}}}, {{{args}}}{more})"


def flatten(parts: tuple[Part, ...]) -> tuple[list[str], list[Arg]]:
    """The ``KEYS`` and ``ARGV`` of ``parts``, laid out in their order."""
    keys: list[str] = []
    args: list[Arg] = []
    for part in parts:
        keys.extend(part.keys)
        args.extend(part.args)
    return keys, args
