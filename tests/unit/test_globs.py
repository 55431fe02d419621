"""The grep glob matcher: linear in the name whatever the pattern, same answers as before.

The oracle is the regular expression the glob used to be translated to (kept here), and
``fnmatch`` for names without ``/``; hypothesis draws the globs and names.
"""

from __future__ import annotations

import fnmatch
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent.tools.globs import compile_glob
from bot.store.workspace import WorkspaceError


def oracle(glob: str) -> re.Pattern[str]:
    """The former translation (bot/agent/tools/files.py ``_glob_regex``): backtracking."""
    out, i = [], 0
    while i < len(glob):
        close = glob.find("]", i + 2) if glob[i] == "[" else -1
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif close > 0:
            body = glob[i + 1 : close]
            negate = body.startswith("!")
            body = "".join(c if c == "-" else re.escape(c) for c in body[negate:])
            out.append("[" + "^" * negate + body + "]")
            i = close + 1
        else:
            out.append({"*": "[^/]*", "?": "[^/]"}.get(glob[i], re.escape(glob[i])))
            i += 1
    return re.compile("".join(out))


GLOB_PIECES = ["a", "b", ".", "/", "*", "?", "**", "**/", "[ab]", "[!a]", "[a-c]", "[.]"]
NAMES = st.text(alphabet="abc./", max_size=14)
GLOBS = st.lists(st.sampled_from(GLOB_PIECES), max_size=7).map("".join)


@settings(max_examples=1500, deadline=None)
@given(glob=GLOBS, name=NAMES)
def test_same_answers_as_the_regex_it_replaces(glob: str, name: str) -> None:
    assert compile_glob(glob).match(name) == bool(oracle(glob).fullmatch(name)), (glob, name)


@settings(max_examples=1500, deadline=None)
@given(
    glob=st.lists(st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]"]), max_size=7).map(
        "".join
    ),
    name=st.text(alphabet="abc.", max_size=14),
)
def test_same_answers_as_fnmatch_within_a_name(glob: str, name: str) -> None:
    assert compile_glob(glob).match(name) == fnmatch.fnmatchcase(name, glob), (glob, name)


@pytest.mark.parametrize(
    ("glob", "name", "ok"),
    [
        ("*.py", "a.py", True),
        ("*.py", "pkg/a.py", False),  # * stays within a name
        ("**.py", "pkg/a.py", True),
        ("src/**/b.py", "src/b.py", True),  # **/ may be nothing
        ("src/**/b.py", "src/x/y/b.py", True),
        ("src/**/b.py", "src/xb.py", False),  # ... or end in /
        ("*.[mM]d", "c.Md", True),
        ("[!a]x", "bx", True),
        ("[!a]x", "ax", False),
        ("?", "/", False),
    ],
)
def test_examples(glob: str, name: str, ok: bool) -> None:
    assert compile_glob(glob).match(name) is ok


@pytest.mark.timeout(10)
@pytest.mark.parametrize("stars", [5, 6, 7, 8])
def test_pathological_globs_take_linear_steps(stars: int) -> None:
    """``*a*a…*b`` on 120 a's: seconds to minutes by backtracking; here at most
    (len(name) + 1) × (len(glob) + 1) steps."""
    glob = "*a" * (stars - 1) + "*b"
    name = "a" * 120
    matched, steps = compile_glob(glob).run(name)
    assert not matched
    assert steps <= (len(name) + 1) * (len(glob) + 1)
    assert compile_glob(glob).match(name + "b")


def test_a_class_that_is_not_valid_is_an_error() -> None:
    with pytest.raises(WorkspaceError, match="not valid"):
        compile_glob("[z-a].py")
