"""Summarize a CSV file: rows, each column's kind, and min/max/mean of numeric columns.

Usage: python3 summarize.py PATH [--delimiter CHAR]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", "")) if text.strip() else None
    except ValueError:
        return None


def describe(name: str, cells: list[str]) -> str:
    filled = [c for c in cells if c.strip()]
    empty = len(cells) - len(filled)
    values = [number(c) for c in filled]
    gap = f", {empty} empty" if empty else ""
    if filled and all(v is not None for v in values):
        nums = [v for v in values if v is not None]
        return (
            f"{name}: number, min {min(nums):g}, max {max(nums):g}, "
            f"mean {statistics.fmean(nums):.6g}{gap}"
        )
    distinct = len(set(filled))
    return f"{name}: text, {distinct} distinct{gap}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--delimiter", default=",")
    args = parser.parse_args()
    try:
        with open(args.path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle, delimiter=args.delimiter))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        print(f"summarize: cannot read {args.path}: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"summarize: {args.path} is empty", file=sys.stderr)
        return 2
    header, body = rows[0], rows[1:]
    print(f"{args.path}: {len(body)} rows, {len(header)} columns")
    for i, name in enumerate(header):
        print("- " + describe(name, [r[i] if i < len(r) else "" for r in body]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
