"""The README is the five-minute page: short, its two set-up commands as they are, every
link it gives working; the docs it points to say one thing (docs/getting-started.md)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.readme_support import DOCS, README, ROOT, section

TRY_IT = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/fanbot console"
TESTS = 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/pytest'


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_the_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_says_what_try_test_deploy_and_where_the_docs_are() -> None:
    assert f"```sh\n{TRY_IT}\n```" in section("Try it (one command)")
    assert f"```sh\n{TESTS}\n```" in section("Run the tests (one command)")
    deploy = section("Deploy it")
    for command in ("fanbot doctor", "fanbot gateway", "fanbot worker --count"):
        assert command in deploy, command
    for guide in ("slack", "telegram", "matrix", "deploy"):
        assert f"(docs/guides/{guide}.md)" in deploy, guide
    assert "(docs/getting-started.md)" in section("Documentation")


def test_every_relative_link_in_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    relative = [link for link in links if "://" not in link]
    assert relative
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert missing == []


def test_commands_are_fanbot_after_the_set_up_lines() -> None:
    """``.venv/bin/fanbot`` only in the one-line set-up commands; after the PATH note, ``fanbot``."""
    for path in [README, *_pages()]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if ".venv/bin/fanbot" in line or ".venv/bin/pytest" in line:
                assert line in (TRY_IT, TESTS) or "`.venv/bin/fanbot …`" in line, (path, line)


def test_the_docs_do_not_contradict_the_code() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in [README, *_pages()])
    assert "no approvals yet" not in text  # approvals exist (docs/runs.md)
    assert "psutil` (in" not in text  # a core dependency (pyproject.toml)
    for stale in ("about 45 MB PSS", "~20 MB PSS per idle worker"):
        assert stale not in text, stale  # one set of sizing figures: docs/sizing.md
