"""Reading sections of README.md and the docs pages, for the tests that hold them to the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def section(title: str, page: Path = README) -> str:
    """The text under ``## title`` in ``page`` up to the next ``## `` heading."""
    text = page.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"{page.name} has no section {title!r}"
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
