"""Agent Skills: the loader (good skills as public collections write them, every malformed
case, duplicates, oversize, symlinks), which skills each agent and type sees, the system
prompt's Skills block, the tool policy around ``load_skill``, and the settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bot.agent import policy
from bot.agent.skills import (
    Skill,
    SkillError,
    check_skills,
    load_skills,
    skills_block,
    skills_for,
    visible_skills,
)
from bot.agent.subagent_types import available_tools, tools_for_type
from bot.agent.tools.skills import LOAD_SKILL, for_agent, skill_tools
from bot.agent.turn import main_agent_tools, system_prompt
from bot.config import Settings, SkillsSettings, SubagentType, load_settings
from bot.errors import ConfigError
from bot.text.untrusted import RULE
from tests.skill_support import pdf_forms, release_notes, skill_md, write


def only(dirs: list[Path], **limits: int) -> dict[str, Skill]:
    return load_skills(dirs, limits=SkillsSettings(**limits))  # type: ignore[arg-type]


def error(dirs: list[Path], **limits: int) -> SkillError:
    with pytest.raises(SkillError) as caught:
        only(dirs, **limits)
    text = str(caught.value)
    assert "\n" not in text  # one line
    return caught.value


def test_public_style_skills_load_with_their_files(tmp_path: Path) -> None:
    folder = pdf_forms(tmp_path / "skills")
    release_notes(tmp_path / "skills")
    write(tmp_path / "skills", "README.md", "not a skill")  # files beside skills: passed over
    write(tmp_path / "skills", "spec/notes.md", "a folder without SKILL.md: not a skill")
    write(tmp_path / "skills", ".hidden/SKILL.md", skill_md("hidden"))  # hidden: passed over
    write(folder, ".DS_Store", b"\0\1")  # hidden files are not the skill's
    found = only([tmp_path / "skills"])
    assert sorted(found) == ["pdf-forms", "release-notes"]
    pdf = found["pdf-forms"]
    assert pdf.description == (
        "Fill in PDF forms and check the result. Use when the user asks to complete, fill "
        "or validate a PDF form."
    )
    assert pdf.root == folder.resolve()
    assert pdf.body.startswith("# Filling PDF forms\n") and "FORM-7731" in pdf.body
    assert pdf.files == (
        "LICENSE.txt",
        "SKILL.md",
        "references/checklist.md",
        "references/fields.md",
        "scripts/fill.py",
    )
    assert pdf.virtual_root == "/skills/pdf-forms"
    assert "/skills/pdf-forms/references/fields.md" in pdf.virtual_paths()
    notes = found["release-notes"]
    assert notes.description.startswith("Write release notes from a list of merged changes:")
    assert notes.files == ("SKILL.md", "assets/template.md")


def test_windows_line_endings_and_a_bom_are_read(tmp_path: Path) -> None:
    text = "\ufeff" + skill_md("crlf", body="# Body\nline").replace("\n", "\r\n")
    write(tmp_path, "crlf/SKILL.md", text.encode())
    [skill] = only([tmp_path]).values()
    assert (skill.name, skill.description) == ("crlf", "Does a thing. Use when asked.")
    assert skill.body.startswith("# Body")


MALFORMED = [
    ("# No front matter\n", "does not start with YAML front matter"),
    ("---\nname: bad\ndescription: never closed\n", "does not start with YAML front matter"),
    ("---\nname: bad\ndescription: Use when: it breaks\n---\n", "front matter is not YAML"),
    ("---\n- name\n- description\n---\n", "front matter is not a mapping"),
    ("---\ndescription: no name\n---\n", "front matter has no name"),
    ("---\nname: bad\n---\n", "front matter has no description"),
    ("---\nname: bad\ndescription: '   '\n---\n", "front matter has no description"),
    ("---\nname: bad\ndescription: [a, b]\n---\n", "front matter's description is not text"),
    ("---\nname: 42\ndescription: d\n---\n", "front matter's name is not text"),
    ("---\nname: Bad\ndescription: d\n---\n", "name 'Bad' is not 1-64 lowercase letters"),
    ("---\nname: -bad\ndescription: d\n---\n", "name '-bad' is not 1-64 lowercase"),
    ("---\nname: other\ndescription: d\n---\n", "name 'other' does not match its folder 'bad'"),
    (f"---\nname: bad\ndescription: {'x' * 1025}\n---\n", "description is 1025 characters"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_front_matter_is_one_line_naming_the_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, "bad/SKILL.md", text)
    caught = error([tmp_path])
    assert caught.path == path
    assert str(caught).startswith(f"skill {path}: ")
    assert message in str(caught)
    assert isinstance(caught, ConfigError)  # a start-up error: one line, exit code 2


def test_a_name_longer_than_64_is_refused(tmp_path: Path) -> None:
    name = "a" * 65
    write(tmp_path, f"{name}/SKILL.md", skill_md(name))
    assert "is not 1-64 lowercase letters" in str(error([tmp_path]))


def test_a_skill_md_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "latin/SKILL.md", skill_md("latin", "caf\xe9").encode("latin-1"))
    assert "is not UTF-8 text" in str(error([tmp_path]))


def test_duplicate_names_across_dirs_name_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a/same/SKILL.md", skill_md("same"))
    second = write(tmp_path, "b/same/SKILL.md", skill_md("same"))
    caught = error([tmp_path / "a", tmp_path / "b"])
    assert caught.path == second
    assert f"skill 'same' is also defined by {first}" in str(caught)


def test_one_directory_listed_twice_is_read_once(tmp_path: Path) -> None:
    pdf_forms(tmp_path)
    assert list(only([tmp_path, tmp_path / "." / "pdf-forms" / ".."])) == ["pdf-forms"]


def test_oversized_skills_are_refused(tmp_path: Path) -> None:
    folder = pdf_forms(tmp_path / "files")
    assert "holds more than 3 files (FANBOT_SKILLS__MAX_FILES)" in str(
        error([tmp_path / "files"], max_files=3)
    )
    write(folder, "assets/big.bin", b"\0" * 6_000)
    caught = error([tmp_path / "files"], max_skill_bytes=5_000)
    assert caught.path == folder
    assert "holds more than 5 KB (FANBOT_SKILLS__MAX_SKILL_BYTES)" in str(caught)
    write(tmp_path, "body/long/SKILL.md", skill_md("long", body="x" * 200))
    assert "instructions are 201 characters, more than 150" in str(
        error([tmp_path / "body"], max_body_chars=150)
    )
    for name in ("a", "b", "c"):
        write(tmp_path, f"many/{name}/SKILL.md", skill_md(name))
    assert "more than 2 skills for one agent (FANBOT_SKILLS__MAX_SKILLS)" in str(
        error([tmp_path / "many"], max_skills=2)
    )


def test_a_symlink_out_of_the_skill_is_refused(tmp_path: Path) -> None:
    secret = write(tmp_path, "outside/secret.txt", "token=abc")
    folder = pdf_forms(tmp_path / "skills")
    (folder / "references" / "leak.md").symlink_to(secret)
    caught = error([tmp_path / "skills"])
    assert caught.path == folder / "references" / "leak.md"
    assert f"is a symlink to {secret}, outside the skill" in str(caught)


def test_a_symlinked_folder_out_of_the_skill_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "outside/etc/passwd", "root:x:0:0")
    folder = pdf_forms(tmp_path / "skills")
    (folder / "etc").symlink_to(tmp_path / "outside" / "etc")
    assert "outside the skill" in str(error([tmp_path / "skills"]))
    (folder / "etc").unlink()
    (folder / "up").symlink_to("..")  # the skills directory: outside the skill too
    assert f"{folder / 'up'}: is a symlink to" in str(error([tmp_path / "skills"]))


def test_symlinks_inside_a_skill_and_a_symlinked_skill_folder_are_fine(tmp_path: Path) -> None:
    folder = pdf_forms(tmp_path / "store")
    (folder / "fields.md").symlink_to(folder / "references" / "fields.md")
    (folder / "refs").symlink_to(folder / "references")  # not walked: listed where they are
    (folder / "dangling").symlink_to(folder / "gone.md")  # inside, missing: passed over
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "pdf-forms").symlink_to(folder)  # installed as a link
    skill = only([tmp_path / "skills"])["pdf-forms"]
    assert skill.root == folder.resolve()
    assert "fields.md" in skill.files and "references/fields.md" in skill.files
    assert not any(f.startswith("refs/") or f == "dangling" for f in skill.files)


def test_a_missing_directory_and_a_skill_listed_as_a_directory(tmp_path: Path) -> None:
    caught = error([tmp_path / "nope"])
    assert caught.path == tmp_path / "nope"
    assert "no such directory" in str(caught)
    folder = pdf_forms(tmp_path)
    assert "this directory is a skill itself" in str(error([folder]))


def test_a_changed_skill_is_loaded_again(tmp_path: Path) -> None:
    path = write(tmp_path, "tool/SKILL.md", skill_md("tool", "First."))
    assert only([tmp_path])["tool"].description == "First."
    path.write_text(skill_md("tool", "Second."))
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))
    assert only([tmp_path])["tool"].description == "Second."
    path.write_text("broken")
    os.utime(path, ns=(stamp + 1_000_000_000, stamp + 1_000_000_000))
    assert "does not start with YAML front matter" in str(error([tmp_path]))


def settings_with(tmp_path: Path) -> Settings:
    for name in ("common", "main-only", "ops-only", "researcher"):
        (tmp_path / name).mkdir()
    write(tmp_path, "common/style/SKILL.md", skill_md("style"))
    write(tmp_path, "main-only/triage/SKILL.md", skill_md("triage"))
    write(tmp_path, "ops-only/oncall/SKILL.md", skill_md("oncall"))
    write(tmp_path, "researcher/cite/SKILL.md", skill_md("cite"))
    return Settings(
        skills={"dirs": [tmp_path / "common"]},  # type: ignore[arg-type]
        agents={"main": {"skills": [tmp_path / "main-only"]},
                "ops": {"skills": [tmp_path / "ops-only"]}},  # type: ignore[dict-item]
        subagent_types=[SubagentType(name="researcher", skills=[tmp_path / "researcher"])],
    )  # fmt: skip


def names(skills: list[Skill]) -> list[str]:
    return [s.name for s in skills]


def test_who_sees_which_skills(tmp_path: Path) -> None:
    settings = settings_with(tmp_path)
    assert names(skills_for(settings, agent_id="main", type_name=None)) == ["style", "triage"]
    assert names(skills_for(settings, agent_id="ops", type_name=None)) == ["oncall", "style"]
    assert names(skills_for(settings, agent_id="main", type_name="researcher")) == [
        "cite",
        "style",
    ]
    # A type sees FANBOT_SKILLS__DIRS and its own, not its agent's main-turn skills.
    assert names(skills_for(settings, agent_id="main", type_name="general-purpose")) == ["style"]
    assert skills_for(Settings(), agent_id="main", type_name=None) == []
    seen = check_skills(settings)
    assert names(seen["agent ops"]) == ["oncall", "style"]
    assert names(seen["type researcher"]) == ["cite", "style"]
    assert names(seen["type explore"]) == ["style"]


def test_a_broken_skill_stops_the_check_and_is_left_out_while_serving(tmp_path: Path) -> None:
    settings = settings_with(tmp_path)
    write(tmp_path, "researcher/bad/SKILL.md", "no front matter")
    with pytest.raises(SkillError, match="researcher/bad/SKILL.md: does not start"):
        check_skills(settings)
    assert visible_skills(settings, agent_id="main", type_name="researcher") == []
    assert names(visible_skills(settings, agent_id="main", type_name=None)) == ["style", "triage"]


def test_the_skills_block_sits_before_the_untrusted_rule(tmp_path: Path) -> None:
    skills = list(only([pdf_forms(tmp_path).parent]).values())
    block = skills_block(skills)
    assert block.startswith("## Skills\n")
    assert "call load_skill with its name" in block and "/skills/<name>/" in block
    assert block.endswith(
        "- pdf-forms: Fill in PDF forms and check the result. Use when the user asks to "
        "complete, fill or validate a PDF form."
    )
    assert skills_block([]) == ""
    prompt = system_prompt(Settings(), "main", skills=skills)
    assert block in prompt and prompt.endswith(RULE)
    assert "## Skills" not in system_prompt(Settings(), "main")


def test_load_skill_is_offered_only_where_a_skill_is_seen(tmp_path: Path) -> None:
    assert skill_tools(Settings()) == []
    settings = settings_with(tmp_path)
    [tool] = skill_tools(settings)
    assert tool.name == LOAD_SKILL and tool.repeat_safe and not tool.untrusted_output
    main = main_agent_tools(settings, "main")
    assert LOAD_SKILL in [t.name for t in main]
    assert LOAD_SKILL not in [t.name for t in for_agent(main, [])]
    # An allow list narrows ordinary tools; load_skill stays unless a deny names it.
    explore = SubagentType(name="x", tools=["read_file"])
    kept = tools_for_type(explore, settings, available_tools(settings))
    assert [t.name for t in kept] == ["read_file", LOAD_SKILL]
    denied = settings.model_copy(
        update={"tools": settings.tools.model_copy(update={"deny": [LOAD_SKILL]})}
    )
    assert LOAD_SKILL not in [t.name for t in tools_for_type(explore, denied)]
    assert LOAD_SKILL not in [
        t.name for t in policy.main_agent_tools(denied, "main", available_tools(denied))
    ]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("clean_env")
def test_skills_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_SKILLS__DIRS", '["/srv/skills", "/opt/more"]')
    monkeypatch.setenv("FANBOT_SKILLS__MAX_FILES", "20")
    monkeypatch.setenv("FANBOT_AGENTS", json.dumps({"main": {"skills": ["/srv/main"]}}))
    monkeypatch.setenv(
        "FANBOT_SUBAGENT_TYPES", json.dumps([{"name": "r", "skills": ["/srv/r"]}])
    )
    settings = load_settings()
    assert settings.skills.dirs == [Path("/srv/skills"), Path("/opt/more")]
    assert settings.skills.max_files == 20
    assert settings.agent("main").skills == [Path("/srv/main")]
    assert settings.subagent_types[0].skills == [Path("/srv/r")]


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FANBOT_SKILLS__MAX_FILES": "0"}, "FANBOT_SKILLS__MAX_FILES"),
        ({"FANBOT_SKILLS__DIRZ": "[]"}, "did you mean FANBOT_SKILLS__DIRS"),
        (
            {"FANBOT_SUBAGENT_TYPES": '[{"name": "c", "runnable": "json:loads", "skills": ["/x"]}]'},
            "so skills cannot be set",
        ),
    ],
)
def test_bad_skills_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=message):
        load_settings()
