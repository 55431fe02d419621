"""The docs site builds with ``mkdocs build --strict`` (a broken link, anchor or nav entry
fails it), and its generated reference pages match their sources (bot/cli/docs_gen.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mkdocs  # noqa: F401  the docs site's builder: a missing one fails, not skips
import pytest

from bot.cli import docs_gen
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
