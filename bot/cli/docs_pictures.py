"""The docs site's pictures, each made from a real run; re-run them with::

    python -m bot.cli.docs_pictures [--only console|ops|bench] [--out docs/img] [--redraw]

* ``console-session.svg``: a ``fanbot console`` session on a pseudo-terminal (its private
  Redis, workers and the offline demo model), rendered with rich's SVG export
  (:mod:`bot.cli.docs_pictures_console`);
* ``ops-page.png``: the ops page of a real stack, screenshotted by headless Chromium
  (:mod:`bot.cli.docs_pictures_ops`);
* ``bench-compare.svg``: ``fanbot bench compare --pool both --quick``'s figures, fanbot
  against bare RQ / Redis per pool (:mod:`bot.cli.docs_pictures_bench`; a few minutes),
  kept in ``bench-compare.json``; ``--redraw`` draws the plot again from them.

Each prints the one-line caption the page shows under it. Needs the ``docs`` extra
(``pip install -e ".[docs]"``: matplotlib, pyte, pexpect), ``redis-server`` and
``chromium``; touches nothing outside temporary directories and ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from pathlib import Path

PICTURES = {
    "console": "console-session.svg",
    "ops": "ops-page.png",
    "bench": "bench-compare.svg",
}
REGENERATE = "python -m bot.cli.docs_pictures"


def _console(out: Path, date: str) -> str:
    from bot.cli import docs_pictures_console as console

    out.write_text(console.to_svg(console.capture()), encoding="utf-8")
    return f"`{console.COMMAND}` on a pseudo-terminal, rendered by `{REGENERATE}`, {date}."


def _ops(out: Path, date: str) -> str:
    from bot.cli import docs_pictures_ops as ops

    ops.capture(out)
    return f"A test stack's ops page, `{ops.COMMAND}` by `{REGENERATE}`, {date}."


def _bench(out: Path, date: str, *, redraw: bool = False) -> str:
    from bot.cli import docs_pictures_bench as bench

    saved = out.with_suffix(".json")
    if redraw:
        figures = bench.BenchFigures.from_json(saved.read_text(encoding="utf-8"))
    else:
        figures, table = bench.measure(date=date, report=_stderr)
        print(table, file=sys.stderr)
        saved.write_text(figures.to_json(), encoding="utf-8")
    out.write_text(bench.draw(figures), encoding="utf-8")
    return f"{figures.caption}; drawn by `{REGENERATE}`."


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


MAKERS: dict[str, Callable[[Path, str], str]] = {
    "console": _console,
    "ops": _ops,
    "bench": _bench,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(PICTURES), help="Make only this picture.")
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="Where they go.")
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="Only redraw the bench plot from its saved figures (bench-compare.json).",
    )
    args = parser.parse_args(argv)
    if args.redraw:
        if args.only not in (None, "bench"):
            parser.error("--redraw redraws the bench plot only")
        path = args.out / PICTURES["bench"]
        print(f"{path}\n  caption: {_bench(path, '', redraw=True)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.UTC).date().isoformat()
    for name in [args.only] if args.only else list(PICTURES):
        path = args.out / PICTURES[name]
        print(f"{name}: making {path} …", file=sys.stderr)
        caption = MAKERS[name](path, date)
        print(f"{path} ({path.stat().st_size // 1024} KB)\n  caption: {caption}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
