"""The pure rules of files in and out (bot.attachments)."""

from __future__ import annotations

from bot import attachments as att


def ref(name: str, size: int | None) -> att.FileRef:
    return att.FileRef(name=name, source=f"url/{name}", size=size)


def test_select_skips_too_big_and_too_many_with_reasons() -> None:
    refs = [ref("a.txt", 10), ref("big.bin", 99), ref("b.txt", None), ref("c.txt", 1)]
    fetch, skipped = att.select(refs, max_files=2, max_bytes=50)
    assert [r.name for r in fetch] == ["a.txt", "b.txt"]
    assert [(a.name, a.skipped) for a in skipped] == [
        ("big.bin", "larger than the 50 B limit"),
        ("c.txt", "more than 2 files in one message"),
    ]


def test_downloaded_checks_the_real_size_and_guesses_the_type() -> None:
    assert att.downloaded(ref("a.pdf", 1), b"x" * 60, max_bytes=50).skipped
    got = att.downloaded(ref("a.pdf", 1), b"%PDF", max_bytes=50)
    assert (got.content_type, got.size, got.data) == ("application/pdf", 4, b"%PDF")


def test_names_are_made_safe_and_unique() -> None:
    assert att.safe_name("../../etc/passwd") == "_.._etc_passwd"  # one segment
    assert att.safe_name("...") == "file"
    assert att.unique_name("a.txt", {"a.txt", "a-2.txt"}) == "a-3.txt"
    assert att.unique_name("README", {"README"}) == "README-2"


def test_turn_line_names_saved_and_skipped_files() -> None:
    line = att.turn_line(["inbox/r.pdf (application/pdf, 120 KB)"], ["big.bin (too big)"])
    assert (
        line
        == "[attached: inbox/r.pdf (application/pdf, 120 KB)]\n[not attached: big.bin (too big)]"
    )


def test_out_files_are_bounded_by_count_and_total_bytes() -> None:
    changed = ["/out/a", "/out/b", "/out/c", "/out/d"]
    sizes = {"/out/a": 10, "/out/b": 50, "/out/c": 5, "/out/d": 1}
    chosen, notes = att.out_files(changed, sizes, max_files=2, max_bytes=20)
    assert chosen == ["/out/a", "/out/c"]
    assert len(notes) == 2 and "out/b not attached" in notes[0]


def test_changed_paths_are_new_or_different() -> None:
    before = {"/out/a": "1", "/out/b": "2"}
    assert att.changed_paths(before, {"/out/a": "1", "/out/b": "3", "/out/c": "4"}) == [
        "/out/b",
        "/out/c",
    ]
