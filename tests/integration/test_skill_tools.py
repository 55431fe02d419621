"""``load_skill`` and the read-only ``/skills`` files, called as the model calls them.

Real Redis (the workspace beside the skills), skills on disk written as public collections
write them; every call goes through ``execute_tool`` with the ToolContext a turn builds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.skills import skills_for
from bot.agent.tools import Tool, execute_tool
from bot.agent.tools.files import file_tools
from bot.agent.tools.skills import skill_tools
from bot.config import Settings
from bot.deps import Deps
from bot.types import ThreadRef
from tests.skill_support import pdf_forms, release_notes, write

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = "agent:main:slack:C1:thread:1.0"


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    pdf_forms(root)
    release_notes(root)
    write(root / "pdf-forms", "assets/logo.png", b"\x89PNG\r\n\x1a\n\xff\xfe")
    return root


@pytest.fixture
def deps(redis_url: str, skills_dir: Path) -> Iterator[Deps]:
    settings = Settings(redis_url=redis_url, skills={"dirs": [skills_dir]})  # type: ignore[arg-type]
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


class Caller:
    def __init__(self, deps: Deps, *, skills: bool = True) -> None:
        seen = skills_for(deps.settings, agent_id="main", type_name=None) if skills else []
        self.ctx = ToolContext(
            deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1",
            agent_id="main", skills=tuple(seen),
        )  # fmt: skip
        tools = [*file_tools(deps.settings), *skill_tools(deps.settings)]
        self.tools: dict[str, Tool] = {t.name: t for t in tools}

    def __call__(self, tool: str, /, **arguments: Any) -> str:
        return execute_tool(self.tools, name=tool, arguments=json.dumps(arguments),
                            ctx=self.ctx, max_chars=100_000)  # fmt: skip


@pytest.fixture
def call(deps: Deps) -> Caller:
    return Caller(deps)


def test_load_skill_returns_the_body_and_the_files_at_their_virtual_paths(call: Caller) -> None:
    text = call("load_skill", name="pdf-forms")
    head, _, body = text.partition("## Instructions\n\n")
    assert head.splitlines()[0] == "# Skill pdf-forms"
    assert head.splitlines()[3:10] == [
        "/skills/pdf-forms/LICENSE.txt",
        "/skills/pdf-forms/SKILL.md",
        "/skills/pdf-forms/assets/logo.png",
        "/skills/pdf-forms/references/checklist.md",
        "/skills/pdf-forms/references/fields.md",
        "/skills/pdf-forms/scripts/fill.py",
        "",
    ]
    assert "relative to /skills/pdf-forms/" in head
    assert body.startswith("# Filling PDF forms\n") and "FORM-7731" in body
    assert "license:" not in body  # the front matter is not part of the instructions


def test_an_unknown_skill_is_an_error_naming_the_ones_there_are(deps: Deps, call: Caller) -> None:
    assert call("load_skill", name="pdf") == (
        "error: no skill 'pdf'; the skills here are: pdf-forms, release-notes"
    )
    assert Caller(deps, skills=False)("load_skill", name="pdf-forms") == (
        "error: no skill 'pdf-forms'; no skills are available here"
    )
    assert call("load_skill", name="").startswith("error: invalid arguments for load_skill")


def test_read_file_ls_and_grep_reach_the_skill_files(call: Caller) -> None:
    assert call("read_file", file_path="/skills/pdf-forms/references/fields.md") == (
        "     1\t# Fields\n     2\t\n     3\t- name\n     4\t- reference_code: FORM-7731"
    )
    assert call("read_file", file_path="skills/release-notes/assets/template.md", offset=1,
                limit=1) == "     2\t## Changed\n[… 1 more lines: read_file with offset=2]"  # fmt: skip
    assert call("ls", path="/skills") == (
        "/skills/pdf-forms/  (6 files)\n/skills/release-notes/  (2 files)"
    )
    listing = call("ls", path="/skills/pdf-forms").splitlines()
    assert listing[:3] == [
        "/skills/pdf-forms/assets/  (1 file)",
        "/skills/pdf-forms/references/  (2 files)",
        "/skills/pdf-forms/scripts/  (1 file)",
    ]
    assert "/skills/pdf-forms/SKILL.md  " in call("ls", path="/skills/pdf-forms")
    assert call("ls", path="/skills/pdf-forms/scripts/fill.py") == (
        "/skills/pdf-forms/scripts/fill.py  41 B"
    )
    assert call("grep", pattern="FORM-7731", path="/skills") == (
        "/skills/pdf-forms/SKILL.md\n/skills/pdf-forms/references/fields.md"
    )
    assert call("grep", pattern="FORM-7731", path="/skills/pdf-forms", glob="references/*",
                output_mode="content") == (
        "/skills/pdf-forms/references/fields.md:4:- reference_code: FORM-7731"
    )  # fmt: skip
    assert call("grep", pattern="PNG", path="/skills") == "no matches for 'PNG'"  # binary


def test_the_workspace_root_shows_the_skills_and_grep_keeps_to_the_workspace(
    call: Caller,
) -> None:
    call("write_file", file_path="notes/a.md", content="FORM-7731 seen\n")
    assert call("ls") == "/notes/  (1 file)\n/skills/  (8 files)"
    assert call("grep", pattern="FORM-7731") == "/notes/a.md"


def test_skills_are_read_only(call: Caller) -> None:
    assert call("write_file", file_path="/skills/pdf-forms/new.md", content="x") == (
        "error: skills are read-only: /skills/pdf-forms/new.md cannot be written or edited; "
        "write your own files elsewhere in the workspace"
    )
    assert call("edit_file", file_path="/skills/pdf-forms/SKILL.md", old_string="PDF",
                new_string="DOC").startswith("error: skills are read-only")  # fmt: skip
    assert call("write_file", file_path="/skills", content="x").startswith(
        "error: skills are read-only"
    )


def test_what_is_not_a_visible_skill_file_is_not_found(deps: Deps, call: Caller) -> None:
    assert call("read_file", file_path="/skills/pdf-forms/nope.md") == (
        "error: file /skills/pdf-forms/nope.md not found"
    )
    assert call("read_file", file_path="/skills/other/SKILL.md") == (
        "error: file /skills/other/SKILL.md not found"
    )
    assert call("read_file", file_path="/skills/pdf-forms/../../etc/passwd") == (
        "error: file /etc/passwd not found"  # normalized inside the workspace, never the disk
    )
    assert call("read_file", file_path="/skills/pdf-forms/assets/logo.png").startswith(
        "error: /skills/pdf-forms/assets/logo.png is binary"
    )
    assert call("ls", path="/skills/nope") == "error: no directory /skills/nope"
    blind = Caller(deps, skills=False)
    assert blind("read_file", file_path="/skills/pdf-forms/SKILL.md") == (
        "error: file /skills/pdf-forms/SKILL.md not found"
    )
    assert blind("ls", path="/skills") == "(no skills here)"
    assert blind("ls") == "(the workspace is empty)"


def test_a_file_swapped_for_a_link_out_after_loading_is_not_read(
    call: Caller, skills_dir: Path, tmp_path: Path
) -> None:
    secret = write(tmp_path, "secret.txt", "token=abc")
    fields = skills_dir / "pdf-forms" / "references" / "fields.md"
    fields.unlink()
    fields.symlink_to(secret)
    text = call("read_file", file_path="/skills/pdf-forms/references/fields.md")
    assert text == (
        "error: /skills/pdf-forms/references/fields.md cannot be read: "
        "no longer a file inside the skill"
    )
    assert "token" not in call("grep", pattern="token", path="/skills")
