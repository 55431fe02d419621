"""The docs pictures generator's pure parts (bot/cli/docs_pictures*.py): the bench plot from
figures, the console's screen rows to SVG. Making the pictures themselves runs real stacks
(``python -m bot.cli.docs_pictures``); the ops page's browser test is
tests/e2e/test_ops_page_browser.py."""

from __future__ import annotations

import html
from pathlib import Path

import pyte
import pytest
from rich.text import Text

from bot.cli import docs_pictures
from bot.cli.docs_pictures_bench import SIDES, BenchFigures, draw
from bot.cli.docs_pictures_console import Cell, _keep_dim, row_text, squeeze, to_svg


def _svg_text(svg: str) -> str:
    return html.unescape(svg).replace("\xa0", " ")


FIGURES = {
    "spawn1": {"threads": [0.034, 0.040, 0.045], "fork": [0.125], "bare": [0.054]},
    "throughput": {"threads": [1332.0], "fork": [918.0], "bare": [1927.0]},
    "pss_run": {"threads": [80_000.0], "fork": [11.4 * 1024 * 1024], "bare": [5.4 * 1024**2]},
}


def test_the_bench_plot_names_each_side_its_panels_and_the_caption() -> None:
    caption = "fanbot bench compare --pool both --quick, 2026-11-28: load average 6.92 → 15.03"
    svg = draw(BenchFigures(figures=FIGURES, names={"burst": "8"}, caption=caption))
    text = _svg_text(svg)
    assert text.startswith("<?xml") and "<svg" in text
    for label in SIDES.values():
        assert label in text
    assert caption in text
    assert "runs per minute," in text and "PSS added per" in text
    assert "0.74× bare" in text  # the threads pool's spawn median over bare RQ's
    assert "makespan" not in text  # not measured: no panel


def test_the_bench_plot_leaves_out_a_pool_not_measured() -> None:
    threads_only = {
        k: {s: v for s, v in sides.items() if s != "fork"} for k, sides in FIGURES.items()
    }
    text = _svg_text(draw(BenchFigures(figures=threads_only, names={}, caption="c")))
    assert SIDES["threads"] in text and SIDES["bare"] in text
    assert SIDES["fork"] not in text


def test_the_bench_plot_refuses_figures_with_nothing_to_draw() -> None:
    with pytest.raises(ValueError, match="no figures"):
        draw(BenchFigures(figures={"spawn1": {}, "unknown": {"bare": [1.0]}}, names={}, caption=""))


def test_bench_figures_round_trip_through_json_and_bad_json_is_refused() -> None:
    figures = BenchFigures(figures=FIGURES, names={"burst": "8"}, caption="c")
    assert BenchFigures.from_json(figures.to_json()) == figures
    with pytest.raises(ValueError, match="not bench figures"):
        BenchFigures.from_json('{"figures": {}}')
    with pytest.raises(ValueError):
        BenchFigures.from_json(
            '{"figures": {"spawn1": {"bare": ["x"]}}, "names": {}, "caption": ""}'
        )


def test_redraw_draws_the_plot_from_the_saved_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = BenchFigures(figures=FIGURES, names={}, caption="measured on a quiet host")
    (tmp_path / "bench-compare.json").write_text(saved.to_json())
    assert docs_pictures.main(["--redraw", "--out", str(tmp_path)]) == 0
    assert "measured on a quiet host" in _svg_text((tmp_path / "bench-compare.svg").read_text())
    assert "caption: measured on a quiet host" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        docs_pictures.main(["--redraw", "--only", "console", "--out", str(tmp_path)])


def test_the_console_svg_holds_the_lines_and_fetches_no_font() -> None:
    lines = [
        Text("you › compare redis streams", style="bold"),
        Text("fanbot › Started 3 subagents"),
    ]
    svg = to_svg(lines, width=60)
    text = _svg_text(svg)
    assert "you › compare redis streams" in text
    assert "fanbot › Started 3 subagents" in text
    assert 'url("http' not in svg and "cdnjs" not in svg  # no web font: nothing fetched
    assert 'local("FiraCode-Regular")' in svg


def test_a_screen_row_becomes_styled_text_in_runs() -> None:
    row = [
        Cell("✅", fg="green"), Cell(""),  # a wide character and its right half
        Cell(" "), Cell("o", fg="brown", bold=True), Cell("k", fg="brown", bold=True),
        Cell("!", fg="brightblack", blink=True), Cell(" "), Cell(" "),
    ]  # fmt: skip
    text = row_text(row)
    assert text.plain == "✅ ok!"
    styles = {text.plain[s.start : s.end]: s.style for s in text.spans}
    assert styles["ok"].color is not None and styles["ok"].color.name == "yellow"
    assert styles["ok"].bold
    assert styles["!"].dim and styles["!"].color is not None
    assert styles["!"].color.name == "bright_black"


def test_a_reversed_cell_swaps_its_colours() -> None:
    [span] = row_text([Cell("x", fg="cyan", reverse=True)]).spans
    assert span.style.color.name == "black" and span.style.bgcolor.name == "cyan"  # type: ignore[union-attr]


def test_squeeze_keeps_one_blank_between_and_none_at_the_ends() -> None:
    lines = [Text(""), Text("a"), Text(""), Text("  "), Text("b"), Text(""), Text("")]
    assert [t.plain for t in squeeze(lines)] == ["a", "", "b"]
    assert squeeze([Text(""), Text(" ")]) == []


def test_the_emulated_screen_keeps_dim_text_dim() -> None:
    screen = pyte.Screen(20, 2)
    _keep_dim(screen)
    pyte.Stream(screen).feed("\x1b[2mfaint\x1b[22m plain \x1b[1;2mboth\x1b[0m")
    text = row_text(screen.buffer[0][x] for x in range(20))
    assert text.plain == "faint plain both"
    assert "".join(text.plain[s.start : s.end] for s in text.spans if s.style.dim) == "faintboth"  # type: ignore[union-attr]
    assert "".join(text.plain[s.start : s.end] for s in text.spans if s.style.bold) == "both"  # type: ignore[union-attr]


def test_an_unknown_picture_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        docs_pictures.main(["--only", "poster"])
    assert exit_.value.code == 2
    assert "invalid choice: 'poster'" in capsys.readouterr().err
