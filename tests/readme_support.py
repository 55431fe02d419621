"""Reading README.md sections, for the tests that hold the README to the code."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section(title: str) -> str:
    """The text under ``## title`` up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"README has no section {title!r}"
    return match[1]


def first_column_names(text: str) -> list[str]:
    """Every ``name`` in backticks in the first column of the markdown table rows."""
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`([^`]+)`", line.split("|")[1])
    return names


def python_block(text: str) -> str:
    """The one fenced ``python`` block in ``text``."""
    [block] = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    return block
