"""Cutting oversized text to a limit with a note that says how much was cut (pure).

Bounds on text that a person or the model wrote (an inbound message, a model reply, a
history entry, a transcript line) cut with :func:`clip`, or :func:`clip_markdown` for text
that gets posted: the first ``limit`` characters, then ``[… N characters cut]`` on its own
line. Every note that says text was cut is worded by :func:`cut_note`, in one of the forms
the places that show it have always used:

==========  ===========================================  ==================================
wording     note                                         used for
==========  ===========================================  ==================================
cut         ``[… 1,234 characters cut]``                 messages, replies, history, logs
result      ``… (truncated, 1,234 more characters)``     an announce's result and notes
tool        ``[… truncated: 1234 more characters]``      a tool's result the model reads
line        ``[… line cut: 1234 more characters]``       one long line of ``read_file``
==========  ===========================================  ==================================

A *result* cut (:func:`clip` with ``wording="result"``) counts an earlier *cut* note the
same way, and drops the kept head's trailing whitespace, since its note starts a line.

Cutting again a text that still *ends* with its note keeps one note whose count adds both
cuts, so a reply bounded by the model client and again in history says how much it lost
in all. Only a note at the very end counts (:func:`split_note`): once text follows a note
(a cut reply quoted in a longer message), the note is ordinary text, a later cut counts it
as characters, and if it lies in the kept head the result shows two notes. Counts are of
the characters of the text given: a fence that :func:`clip_markdown` closed counts as
text when that text is cut again.
"""

from __future__ import annotations

import re
from typing import Literal

from bot.text.chunking import split_markdown_parts

_NOTE = re.compile(r"\n\[… ([\d,]+) characters cut\]\Z")
_NOTE_MAX = 48  # longest possible note, with its newline


NoteWording = Literal["cut", "result", "tool", "line"]


def cut_note(cut: int, *, wording: NoteWording = "cut") -> str:
    """The marker appended to a cut text, ``[… 1,234 characters cut]`` (the other
    wordings are in the module's table)."""
    if wording == "result":
        return f"… (truncated, {cut:,} more characters)"
    if wording == "tool":
        return f"[… truncated: {cut} more characters]"
    if wording == "line":
        return f"[… line cut: {cut} more characters]"
    return f"[… {cut:,} characters cut]"


def split_note(text: str) -> tuple[int, int]:
    """Where ``text``'s body ends and how many characters an earlier cut dropped.

    Only a note that ends ``text`` (after a newline) is found; ``(len(text), 0)`` otherwise,
    even when a note appears earlier in the text.
    """
    match = _NOTE.search(text, max(0, len(text) - _NOTE_MAX))
    if match is None:
        return len(text), 0
    return match.start(), int(match[1].replace(",", ""))


def clip(text: str, limit: int, *, wording: Literal["cut", "result"] = "cut") -> str:
    """``text`` if its body has at most ``limit`` characters, else the head and a note.

    The body is ``text`` without a trailing note; when it is cut, that note is replaced by
    one counting both cuts (so ``clip`` is idempotent). Only the kept head is copied, so
    cutting a huge text costs ``limit`` characters.
    """
    if len(text) <= limit:
        return text
    end, earlier = split_note(text)
    if end <= limit:
        return text
    if wording == "result":
        return text[:limit].rstrip() + "\n" + cut_note(end - limit + earlier, wording="result")
    return text[:limit] + "\n" + cut_note(end - limit + earlier)


def clip_markdown(text: str, limit: int) -> str:
    """Like :func:`clip` for markdown that gets posted: a cut inside a fenced code block
    closes the fence first, so the note renders as text and not as code."""
    if len(text) <= limit:
        return text
    end, earlier = split_note(text)
    if end <= limit:
        return text
    head = text[:limit]
    # One part whatever the content: the limit leaves room for the longest closing fence.
    [part] = split_markdown_parts(head, limit=2 * len(head) + 8)
    return head + part.close + "\n" + cut_note(end - limit + earlier)
