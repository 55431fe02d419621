"""The ``grep`` tool's glob, matched in linear time.

``*`` and ``?`` stay within a name, ``**`` crosses directories, ``**/`` is any number of
leading directories (none too), ``[...]`` is a class (``[!...]`` negated, ``a-z`` a range).
A regular expression of such a glob backtracks: ``*a*a*a*a*a*b`` against a long name took
seconds per star. Here the glob is a small automaton run over the name once, keeping the
set of places it may be at: at most (len(name) + 1) × (len(glob) + 1) steps, whatever the
pattern (see docs/architecture.md, "Bounded growth and exposure").
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from bot.store.workspace import WorkspaceError


class _Kind(enum.Enum):
    CHAR = enum.auto()  # one given character
    ONE = enum.auto()  # ? : one character but /
    CLASS = enum.auto()  # [...] : one character of the class
    STAR = enum.auto()  # * : any characters but /
    ANY = enum.auto()  # ** : any characters
    DIRS = enum.auto()  # **/ : nothing, or any characters ending in /


@dataclass(frozen=True)
class _Token:
    kind: _Kind
    char: str = ""
    klass: re.Pattern[str] | None = None

    def takes(self, c: str) -> bool:
        """Whether this one-character token consumes ``c``."""
        if self.kind is _Kind.CHAR:
            return c == self.char
        if self.kind is _Kind.ONE:
            return c != "/"
        return self.klass is not None and self.klass.fullmatch(c) is not None


_REPEATS = (_Kind.STAR, _Kind.ANY, _Kind.DIRS)


@dataclass(frozen=True)
class Glob:
    """A compiled glob; :meth:`match` tells whether a whole text matches it."""

    tokens: tuple[_Token, ...]

    def match(self, text: str) -> bool:
        return self.run(text)[0]

    def run(self, text: str) -> tuple[bool, int]:
        """Whether ``text`` matches, and the steps it took (one per state per character).

        A state ``i`` is "before token i"; ``-(i + 1)`` is "inside a ``**/``" (some of its
        characters read: it may end only after a ``/``).
        """
        steps = 0
        states = self._closure({0})
        for c in text:
            nxt: set[int] = set()
            for state in states:
                steps += 1
                nxt |= self._step(state, c)
            states = self._closure(nxt)
            if not states:
                return False, steps
        return len(self.tokens) in states, steps

    def _closure(self, states: set[int]) -> set[int]:
        """``states`` and those reached without reading: a repeat may match nothing."""
        out, todo = set(states), list(states)
        while todo:
            i = todo.pop()
            if 0 <= i < len(self.tokens) and self.tokens[i].kind in _REPEATS and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return out

    def _step(self, state: int, c: str) -> set[int]:
        if state < 0:  # inside **/ at token -state - 1
            i = -state - 1
            return {state, i + 1} if c == "/" else {state}
        if state == len(self.tokens):
            return set()
        token = self.tokens[state]
        if token.kind is _Kind.STAR:
            return {state} if c != "/" else set()
        if token.kind is _Kind.ANY:
            return {state}
        if token.kind is _Kind.DIRS:
            return {-(state + 1), state + 1} if c == "/" else {-(state + 1)}
        return {state + 1} if token.takes(c) else set()


def compile_glob(glob: str) -> Glob:
    """``glob`` compiled; :class:`WorkspaceError` if a class is not valid (``[z-a]``)."""
    tokens: list[_Token] = []
    i = 0
    while i < len(glob):
        close = glob.find("]", i + 2) if glob[i] == "[" else -1
        if glob.startswith("**/", i):
            tokens.append(_Token(_Kind.DIRS))
            i += 3
        elif glob.startswith("**", i):
            tokens.append(_Token(_Kind.ANY))
            i += 2
        elif close > 0:
            tokens.append(_Token(_Kind.CLASS, klass=_klass(glob, glob[i + 1 : close])))
            i = close + 1
        elif glob[i] == "*":
            tokens.append(_Token(_Kind.STAR))
            i += 1
        elif glob[i] == "?":
            tokens.append(_Token(_Kind.ONE))
            i += 1
        else:
            tokens.append(_Token(_Kind.CHAR, char=glob[i]))
            i += 1
    return Glob(tuple(tokens))


def _klass(glob: str, body: str) -> re.Pattern[str]:
    """One ``[...]`` as a one-character regular expression (it cannot backtrack)."""
    negate = body.startswith("!")
    inner = "".join(c if c == "-" else re.escape(c) for c in body[negate:])
    try:
        return re.compile("[" + "^" * negate + inner + "]")
    except re.error as exc:
        raise WorkspaceError(f"glob {glob!r} is not valid: {exc}") from None
