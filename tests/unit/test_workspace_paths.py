"""Workspace paths are virtual: every spelling of a file inside it is one canonical path,
and nothing climbs out of it."""

from __future__ import annotations

import pytest

from bot.store.workspace import WorkspaceError, normalize_path
from bot.text.units import size


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("/a", "/a"),
        ("a", "/a"),
        ("./a", "/a"),
        ("a/../b", "/b"),
        ("notes/a.md", "/notes/a.md"),
        ("/notes/a.md", "/notes/a.md"),
        ("//notes///a.md/", "/notes/a.md"),
        ("notes/./x/../a.md", "/notes/a.md"),
        ("a b/ü.txt", "/a b/ü.txt"),
        ("..a/b..", "/..a/b.."),  # dots inside a name are just a name
        ("C:\\x", "/C:\\x"),  # no Windows meaning: one odd but harmless name
    ],
)
def test_spellings_of_one_file_are_one_path(given: str, canonical: str) -> None:
    assert normalize_path(given) == canonical


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("../x", "leaves the workspace"),
        ("/../../etc/passwd", "leaves the workspace"),
        ("a/../../b", "leaves the workspace"),
        ("./..", "leaves the workspace"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("~/x", "'~' means nothing here"),
        ("/", "names the workspace root"),
        ("", "names the workspace root"),
        ("a/..", "names the workspace root"),
        ("x" * 256, "longer than 255 bytes"),
        ("/".join(["d"] * 33), "deeper than 32"),
        ("/".join(["d" * 200] * 6), "longer than 1024 bytes"),
        ("é" * 600, "longer than 1024 bytes"),  # bytes, not characters
    ],
)
def test_paths_that_leave_or_break_the_workspace_are_refused(given: str, why: str) -> None:
    with pytest.raises(WorkspaceError, match=why):
        normalize_path(given)


@pytest.mark.parametrize("root", ["/", "", ".", "a/..", "/./"])
def test_the_root_is_a_directory(root: str) -> None:
    assert normalize_path(root, directory=True) == "/"


def test_errors_are_short_texts_for_the_model() -> None:
    with pytest.raises(WorkspaceError) as caught:
        normalize_path("../" * 300 + "etc/passwd")
    assert len(str(caught.value)) < 120  # a huge path is not echoed back in full


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (999, "999 B"), (1_500, "1.5 kB"), (32_000_000, "32 MB")]
)
def test_sizes_read_as_words(n: int, text: str) -> None:
    assert size(n, precise=True) == text
