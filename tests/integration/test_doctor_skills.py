"""``fanbot doctor`` lists the skills each agent and each subagent type sees, and names the
file of a skill that cannot be loaded (docs/skills.md).

Real CLI in a subprocess, against the test Redis and the fake model endpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.testing.fake_openai import FakeOpenAI
from tests.integration.test_doctor import RIGHT_KEY, KeyedOpenAI, doctor

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "tests" / "skill_collection"
EXAMPLES = REPO / "docs" / "skills" / "examples"


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with KeyedOpenAI(models=("gpt-4o-mini",)) as fake:
        yield fake


def base(redis_url: str, model: FakeOpenAI) -> dict[str, str]:
    return {
        "FANBOT_REDIS_URL": redis_url,
        "FANBOT_OPENAI__BASE_URL": model.base_url,
        "FANBOT_OPENAI__API_KEY": RIGHT_KEY,
    }


async def test_each_agent_and_type_lists_the_skills_it_sees(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    types = [{"name": "writer", "description": "Writes.", "skills": [str(EXAMPLES)]}]
    env = {
        "FANBOT_SKILLS__DIRS": json.dumps([str(COLLECTION)]),
        "FANBOT_SUBAGENT_TYPES": json.dumps(types),
        "FANBOT_AGENTS": json.dumps({"ops": {"skills": [str(EXAMPLES)]}}),
    }
    report = await doctor(tmp_path, **base(redis_url, model), **env)
    assert report.line("skills main") == "ok   skills main: brand-voice, pdf-tools"
    everyone_and_examples = "brand-voice, csv-summary, pdf-tools, release-notes"
    assert report.line("skills ops") == f"ok   skills ops: {everyone_and_examples}"
    assert report.line("skills type writer") == f"ok   skills type writer: {everyone_and_examples}"
    assert report.line("skills type explore") == "ok   skills type explore: brand-voice, pdf-tools"
    assert report.code == 0, report


async def test_no_skills_reads_none(tmp_path: Path, redis_url: str, model: FakeOpenAI) -> None:
    report = await doctor(tmp_path, **base(redis_url, model))
    assert report.line("skills main") == "ok   skills main: (none)"
    assert report.line("skills type general-purpose") == "ok   skills type general-purpose: (none)"


async def test_a_malformed_skill_is_one_bad_line_naming_its_file(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    broken = tmp_path / "skills" / "broken"
    broken.mkdir(parents=True)
    (broken / "SKILL.md").write_text("---\nname: broken\ndescription: [unclosed\n---\nBody.\n")
    env = {"FANBOT_SKILLS__DIRS": json.dumps([str(tmp_path / "skills")])}
    report = await doctor(tmp_path, **base(redis_url, model), **env)
    assert report.code == 1, report
    line = report.line("skills")
    assert line.startswith("BAD  skills: ") and str(broken / "SKILL.md") in line, line
    assert "skills main" not in report.stdout


async def test_a_skill_the_sandbox_could_not_mount_is_a_warning(
    tmp_path: Path, redis_url: str, model: FakeOpenAI
) -> None:
    closed = tmp_path / "closed"
    (closed / "notes").mkdir(parents=True)
    (closed / "notes" / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\n---\nHi\n")
    closed.chmod(0o700)
    env = {"FANBOT_SKILLS__DIRS": json.dumps([str(closed)])}
    report = await doctor(tmp_path, **base(redis_url, model), **env)
    assert report.line("skills main") == "ok   skills main: notes"
    if os.geteuid() == 0:  # a root worker's sandbox runs as FANBOT_SANDBOX__UID (65534)
        assert report.line("skills in the sandbox") == (
            f"warn skills in the sandbox: execute would not mount /skills/notes ({closed} is "
            "closed to uid 65534, the sandbox's (FANBOT_SANDBOX__UID)): make the skill "
            "directories readable by others (chmod -R o+rX), or run the worker as a user"
        )
    else:  # the worker's own uid mounts what it loaded
        assert "skills in the sandbox" not in report.stdout
