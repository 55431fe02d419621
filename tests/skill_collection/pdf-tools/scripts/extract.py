"""Print the text of each page of a (simple, uncompressed) PDF: ``page N: <text>``.

Reads the literal strings shown by ``Tj`` operators, page by page; enough for the test
documents this collection ships with, and standard library only.
"""

from __future__ import annotations

import re
import sys

PAGE = re.compile(rb"/Type\s*/Page\b(?!s)")
SHOWN = re.compile(rb"\((.*?)(?<!\\)\)\s*Tj", re.S)


def pages(data: bytes) -> list[str]:
    chunks = PAGE.split(data)[1:]
    return [" ".join(s.decode("latin-1") for s in SHOWN.findall(chunk)) for chunk in chunks]


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: extract.py FILE.pdf", file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], "rb") as handle:
            data = handle.read()
    except OSError as exc:
        print(f"extract: {exc}", file=sys.stderr)
        return 2
    if not data.startswith(b"%PDF-"):
        print(f"extract: {sys.argv[1]} is not a PDF", file=sys.stderr)
        return 2
    for number, text in enumerate(pages(data), start=1):
        print(f"page {number}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
