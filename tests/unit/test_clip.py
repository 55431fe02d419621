"""What bot/text/clip.py's docstring promises about repeated cuts, one case each."""

from __future__ import annotations

from bot.text.clip import clip, clip_markdown, cut_note, split_note


def test_cutting_a_cut_text_again_keeps_one_note_counting_both_cuts() -> None:
    once = clip("a" * 100, 50)
    twice = clip(once, 20)
    assert twice == "a" * 20 + "\n" + cut_note(80)
    assert twice.count("characters cut") == 1
    assert split_note(twice) == (20, 80)


def test_a_larger_limit_leaves_a_cut_text_as_it_is() -> None:
    once = clip("a" * 100, 50)
    assert clip(once, 60) == clip(once, 50) == once  # idempotent, the note is not body


def test_a_note_followed_by_text_is_ordinary_text() -> None:
    quoted = clip("a" * 100, 50) + " tail" * 20  # a cut reply quoted in a longer message
    assert split_note(quoted) == (len(quoted), 0)
    cut = clip(quoted, 80)
    assert cut.count("characters cut") == 2  # the quoted note is in the kept head
    assert cut.endswith("\n" + cut_note(len(quoted) - 80))  # 50 dropped earlier: not added


def test_a_fence_closed_by_clip_markdown_counts_as_text_when_cut_again() -> None:
    text = "```\n" + "x" * 100 + "\n```"
    once = clip_markdown(text, 50)
    assert once == text[:50] + "\n```\n" + cut_note(len(text) - 50)
    body = len(text[:50] + "\n```")  # the closing fence is body now
    twice = clip(once, 30)
    assert twice == text[:30] + "\n" + cut_note((len(text) - 50) + (body - 30))
