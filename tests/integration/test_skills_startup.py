"""A broken skill stops every serving command at start-up: one line naming the file, exit
code 2 (the real command line in a subprocess, as an operator runs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_cli_startup import one_line, run
from tests.skill_support import pdf_forms, skill_md, write


@pytest.mark.parametrize("command", ["gateway", "worker", "console"])
def test_a_malformed_skill_stops_start_up_naming_its_file(tmp_path: Path, command: str) -> None:
    pdf_forms(tmp_path / "skills")
    bad = write(tmp_path / "skills", "notes/SKILL.md", "---\nname: notes\n---\n# Notes\n")
    env = {"FANBOT_SKILLS__DIRS": json.dumps([str(tmp_path / "skills")])}
    one_line(run(tmp_path, command, env), command, f"skill {bad}: front matter has no description")


def test_a_type_s_duplicate_skill_stops_the_worker(tmp_path: Path) -> None:
    first = write(tmp_path, "common/style/SKILL.md", skill_md("style"))
    again = write(tmp_path, "typed/style/SKILL.md", skill_md("style"))
    env = {
        "FANBOT_SKILLS__DIRS": json.dumps([str(tmp_path / "common")]),
        "FANBOT_SUBAGENT_TYPES": json.dumps(
            [{"name": "writer", "skills": [str(tmp_path / "typed")]}]
        ),
    }
    one_line(
        run(tmp_path, "worker", env), "worker", f"{again}: skill 'style' is also defined by {first}"
    )
