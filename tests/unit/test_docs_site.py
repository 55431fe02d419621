"""The docs site builds with ``mkdocs build --strict`` (a broken link, anchor or nav entry
fails it), its generated reference pages match their sources (bot/cli/docs_gen.py), and
its pictures (docs/img/, made by bot/cli/docs_pictures.py) are all shown and all there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mkdocs  # noqa: F401  the docs site's builder: a missing one fails, not skips
import pytest

from bot.cli import docs_gen, docs_pictures
from bot.commands import registry
from bot.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "reference" / "configuration" / "index.html").is_file()
    assert (tmp_path / "reference" / "commands" / "index.html").is_file()
    # the architecture diagrams reach the page as mermaid blocks (rendered in the browser)
    architecture = (tmp_path / "architecture" / "index.html").read_text()
    assert architecture.count('class="mermaid"') >= 3


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\nSee [nowhere](missing.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: t\ndocs_dir: docs\ntheme:\n  name: material\n")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "missing.md" in done.stderr


@pytest.mark.parametrize("page", sorted(docs_gen.PAGES, key=str), ids=str)
def test_the_generated_pages_are_current(page: Path) -> None:
    committed = (ROOT / page).read_text(encoding="utf-8") if (ROOT / page).is_file() else ""
    assert committed == docs_gen.PAGES[page](), (
        f"{page} differs from its source; regenerate it: {docs_gen.REGENERATE}"
    )


def test_every_setting_is_in_the_configuration_reference() -> None:
    page = docs_gen.configuration_page()
    assert "`FANBOT_OPENAI__MODEL`" in page
    assert "`FANBOT_SUBAGENTS__MAX_CONCURRENT`" in page
    for name, field in Settings.model_fields.items():
        assert f"FANBOT_{name.upper()}" in page, name
        assert field is not None
    # secrets are marked, list-of-model entries shown with their keys
    secret_row = next(line for line in page.splitlines() if "`FANBOT_SLACK__BOT_TOKEN`" in line)
    assert "**Secret**" in secret_row
    assert "### Entries of `FANBOT_SUBAGENT_TYPES`" in page
    assert "| `runnable` |" in page
    assert "| `price.input` |" in page


def test_every_command_is_in_the_commands_reference() -> None:
    page = docs_gen.commands_page()
    for command in registry.COMMANDS:
        assert f"`/{command.name}`" in page
        for alias in command.aliases:
            assert f"`/{alias}`" in page
    for sub in registry.SUBAGENTS:
        assert f"`{sub.spelled}`" in page


def test_check_mode_names_a_stale_page_and_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert docs_gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert docs_gen.REGENERATE in capsys.readouterr().err
    assert docs_gen.main(["--root", str(tmp_path)]) == 0
    assert docs_gen.main(["--check", "--root", str(tmp_path)]) == 0


PICTURE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
PICTURE_SUFFIXES = {".svg", ".png", ".jpg", ".jpeg", ".gif", ".webp"}


def shown_pictures(docs: Path) -> dict[Path, list[tuple[str, str]]]:
    """Every local picture a page shows (``![alt](path)``, relative to the page), with the
    pages and alt texts that show it."""
    shown: dict[Path, list[tuple[str, str]]] = {}
    for page in sorted(docs.rglob("*.md")):
        for alt, target in PICTURE.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            shown.setdefault(path, []).append((str(page.relative_to(docs)), alt))
    return shown


def test_every_picture_is_shown_and_every_shown_picture_exists() -> None:
    docs = ROOT / "docs"
    shown = shown_pictures(docs)
    files = {p.resolve() for p in (docs / "img").rglob("*") if p.suffix in PICTURE_SUFFIXES}
    assert files, "docs/img has no pictures"
    assert not files - shown.keys(), f"pictures no page shows: {sorted(files - shown.keys())}"
    missing = {str(p): pages for p, pages in shown.items() if not p.is_file()}
    assert not missing, f"pages show pictures that do not exist: {missing}"
    assert all(alt.strip() for pages in shown.values() for _, alt in pages), (
        "a picture has no alt text"
    )
    for name in docs_pictures.PICTURES.values():  # the generator's pictures are all there
        assert (docs / "img" / name).resolve() in shown


def test_the_picture_check_finds_a_missing_and_an_unshown_picture(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "shown.png").write_bytes(b"png")
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "a.md").write_text(
        "![the shown one](../img/shown.png) ![](../img/gone.svg) ![x](https://e.org/y.png)\n"
    )
    shown = shown_pictures(tmp_path)
    assert shown == {
        (tmp_path / "img" / "shown.png").resolve(): [("guides/a.md", "the shown one")],
        (tmp_path / "img" / "gone.svg").resolve(): [("guides/a.md", "")],
    }


def test_the_pictures_stay_small() -> None:
    limits = {".svg": 300_000, ".png": 400_000}
    for path in (ROOT / "docs" / "img").iterdir():
        assert path.stat().st_size <= limits.get(path.suffix, 400_000), path.name
