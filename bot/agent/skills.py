"""Agent Skills: folders holding a ``SKILL.md`` (YAML front matter ``name`` and
``description``, then Markdown instructions) and the files those instructions refer to.

Progressive disclosure, as the format intends (docs/skills.md): each skill an agent sees is
named with its description in its system prompt (:func:`skills_block`), its body comes when
the agent calls ``load_skill``, and its files are read-only at ``/skills/<name>/<path>``
(:mod:`bot.agent.tools.skills`). Skills are installed by the operator, so a body is trusted
as instructions.

Which skills an agent sees (:func:`skill_dirs`): ``FANBOT_SKILLS__DIRS`` for everyone, plus
``FANBOT_AGENTS.<id>.skills`` for that agent's main turns, or a subagent type's ``skills``
for its runs. Loading checks every skill; a mistake is one :class:`SkillError` naming the
file, which stops start-up (:func:`check_skills`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.config import Settings, SkillsSettings
from bot.errors import ConfigError
from bot.runs.type_registry import subagent_types
from bot.text import units

log = logging.getLogger(__name__)

SKILLS_ROOT = "/skills"
"""The virtual directory of the skills: a skill's files are at ``/skills/<name>/<path>``."""
SKILL_FILE = "SKILL.md"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_DESCRIPTION_CHARS = 1024
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)


class SkillError(ConfigError):
    """A skill that cannot be loaded; the message is one line naming the file."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"skill {path}: {message}")


@dataclass(frozen=True)
class Skill:
    """One loaded skill.

    Attributes:
        name: Its front matter's ``name`` (also its folder's name).
        description: What it is for and when to use it (shown in the system prompt).
        root: Its folder, resolved.
        body: ``SKILL.md`` after the front matter: the instructions.
        files: Every file of it, ``SKILL.md`` included, relative to ``root`` (POSIX
            separators, sorted; hidden files and folders left out).
    """

    name: str
    description: str
    root: Path
    body: str
    files: tuple[str, ...]

    @property
    def virtual_root(self) -> str:
        """``/skills/<name>``."""
        return f"{SKILLS_ROOT}/{self.name}"

    def virtual_paths(self) -> list[str]:
        """Its files as the file tools name them."""
        return [f"{self.virtual_root}/{rel}" for rel in self.files]


def load_skills(dirs: Sequence[Path], *, limits: SkillsSettings | None = None) -> dict[str, Skill]:
    """Every skill in ``dirs`` (each a directory of skill folders) by name; a folder with no
    ``SKILL.md`` is not a skill and is passed over. Cached per process while no folder's or
    ``SKILL.md``'s modification time changes.

    Raises:
        SkillError: A directory is missing or is a skill itself; a ``SKILL.md`` has front
            matter that is not YAML or lacks a valid ``name`` or ``description``; two
            skills share a name; a skill is bigger than ``limits`` allow or holds a symlink
            that leaves it; there are more skills than ``limits.max_skills``.
    """
    limits = limits or SkillsSettings()
    unique = tuple(dict.fromkeys(str(Path(d).expanduser().resolve()) for d in dirs))
    bounds = (limits.max_skill_bytes, limits.max_files, limits.max_body_chars, limits.max_skills)
    return dict(_load(unique, _stamp(unique), bounds))


def skill_dirs(settings: Settings, *, agent_id: str, type_name: str | None) -> list[Path]:
    """The directories whose skills an agent's main turns (``type_name`` None) or a
    subagent type's runs see: ``FANBOT_SKILLS__DIRS``, then the agent's or the type's own."""
    dirs = list(settings.skills.dirs)
    if type_name is None:
        dirs += settings.agent(agent_id).skills
    else:
        sub_type = subagent_types(settings).get(type_name)
        dirs += sub_type.skills if sub_type is not None else []
    return dirs


def skills_for(settings: Settings, *, agent_id: str, type_name: str | None) -> list[Skill]:
    """The skills an agent's main turns (``type_name`` None) or a subagent type's runs see,
    by name.

    Raises:
        SkillError: As :func:`load_skills`.
    """
    dirs = skill_dirs(settings, agent_id=agent_id, type_name=type_name)
    if not dirs:
        return []
    found = load_skills(dirs, limits=settings.skills)
    return [found[name] for name in sorted(found)]


def visible_skills(settings: Settings, *, agent_id: str, type_name: str | None) -> list[Skill]:
    """:func:`skills_for` while serving: a skill broken after start-up leaves the agent
    without skills (logged as an error naming the file) rather than failing its work."""
    try:
        return skills_for(settings, agent_id=agent_id, type_name=type_name)
    except SkillError as exc:
        log.error("skills left out: %s", exc)
        return []


def check_skills(settings: Settings) -> dict[str, list[Skill]]:
    """Load what every agent and subagent type sees, once, at start-up: ``"agent <id>"`` /
    ``"type <name>"`` -> its skills.

    Raises:
        SkillError: The first skill that cannot be loaded.
    """
    seen: dict[str, list[Skill]] = {}
    for agent_id in dict.fromkeys([settings.agent_id, *settings.agents]):
        seen[f"agent {agent_id}"] = skills_for(settings, agent_id=agent_id, type_name=None)
    for name, sub_type in subagent_types(settings).items():
        if sub_type.runnable is None:
            seen[f"type {name}"] = skills_for(settings, agent_id=settings.agent_id, type_name=name)
    return seen


def skills_block(skills: Sequence[Skill]) -> str:
    """The system prompt's part on skills: how to load one, then each name and description
    ("" when there are none)."""
    if not skills:
        return ""
    lines = [
        "## Skills",
        "Skills are instructions for particular tasks, installed by the operator. When a "
        "task fits a skill's description, call load_skill with its name first and follow "
        f"what it says. A skill's files are at {SKILLS_ROOT}/<name>/ (read-only: read_file, "
        "ls and grep reach them).",
        "",
    ]
    lines += [f"- {s.name}: {' '.join(s.description.split())}" for s in skills]
    return "\n".join(lines)


def parse_skill_md(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """``SKILL.md``'s front matter (a mapping) and its body (pure).

    Raises:
        SkillError: No front matter, or it is not a YAML mapping.
    """
    found = _FRONT_MATTER.match(text.removeprefix("\ufeff"))
    if found is None:
        raise SkillError(path, "does not start with YAML front matter between '---' lines")
    try:
        data = yaml.safe_load(found[1])
    except yaml.YAMLError as exc:
        raise SkillError(path, f"front matter is not YAML: {_one_line(str(exc))}") from None
    if not isinstance(data, dict):
        raise SkillError(path, "front matter is not a mapping of keys (name, description, …)")
    body = text.removeprefix("\ufeff")[found.end() :].lstrip("\r\n")
    return data, body


def skill_file(skill: Skill, rel: str, *, max_bytes: int) -> Path:
    """The real path of ``skill``'s file ``rel``, checked again as it is read: one of its
    files, still inside its folder, a regular file of at most ``max_bytes``.

    Raises:
        SkillError: It is none of these (any more).
    """
    if rel not in skill.files:
        raise SkillError(skill.root / rel, "not a file of the skill")
    real = (skill.root / rel).resolve()
    if not real.is_relative_to(skill.root) or not real.is_file():
        raise SkillError(skill.root / rel, "no longer a file inside the skill")
    if real.stat().st_size > max_bytes:
        raise SkillError(
            real, f"bigger than {units.size(max_bytes)} (FANBOT_SKILLS__MAX_SKILL_BYTES)"
        )
    return real


@functools.lru_cache(maxsize=32)
def _load(
    dirs: tuple[str, ...], stamp: tuple[Any, ...], bounds: tuple[int, int, int, int]
) -> Mapping[str, Skill]:
    del stamp  # part of the cache key only: a changed skill loads again
    max_bytes, max_files, max_body, max_skills = bounds
    found: dict[str, Skill] = {}
    for directory in map(Path, dirs):
        for folder in _skill_folders(directory):
            skill = _load_one(folder, max_bytes=max_bytes, max_files=max_files, max_body=max_body)
            if skill.name in found:
                first = found[skill.name].root / SKILL_FILE
                raise SkillError(
                    folder / SKILL_FILE, f"skill {skill.name!r} is also defined by {first}"
                )
            found[skill.name] = skill
            if len(found) > max_skills:
                raise SkillError(
                    directory,
                    f"more than {max_skills} skills for one agent (FANBOT_SKILLS__MAX_SKILLS)",
                )
    return found


def _stamp(dirs: tuple[str, ...]) -> tuple[Any, ...]:
    """What says a skill changed: each directory's, skill folder's and ``SKILL.md``'s
    modification time."""
    stamp: list[Any] = []
    for directory in dirs:
        stamp.append((directory, _mtime(Path(directory))))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            stamp.append(
                (entry.name, _mtime(Path(entry.path)), _mtime(Path(entry.path, SKILL_FILE)))
            )
    return tuple(stamp)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _skill_folders(directory: Path) -> Iterator[Path]:
    """The folders of ``directory`` holding a ``SKILL.md``, by name (hidden ones left out)."""
    if not directory.is_dir():
        raise SkillError(directory, "no such directory (FANBOT_SKILLS__DIRS or a skills setting)")
    if (directory / SKILL_FILE).is_file():
        raise SkillError(
            directory / SKILL_FILE,
            "this directory is a skill itself; list the directory that holds its folder",
        )
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if not entry.name.startswith(".") and (entry / SKILL_FILE).is_file():
            yield entry


def _load_one(folder: Path, *, max_bytes: int, max_files: int, max_body: int) -> Skill:
    skill_md = folder / SKILL_FILE
    root = folder.resolve()
    files = _files(folder, root, max_bytes=max_bytes, max_files=max_files)
    try:
        text = (root / SKILL_FILE).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SkillError(skill_md, "is not UTF-8 text") from None
    except OSError as exc:
        raise SkillError(skill_md, f"cannot be read: {exc.strerror or exc}") from None
    data, body = parse_skill_md(skill_md, text)
    name = _text_key(skill_md, data, "name")
    description = _text_key(skill_md, data, "description")
    if not NAME.fullmatch(name):
        raise SkillError(
            skill_md,
            f"name {name!r} is not 1-64 lowercase letters, digits and hyphens "
            "(starting with a letter or digit)",
        )
    if name != folder.name:
        raise SkillError(skill_md, f"name {name!r} does not match its folder {folder.name!r}")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillError(
            skill_md,
            f"description is {len(description)} characters, more than {MAX_DESCRIPTION_CHARS}",
        )
    if len(body) > max_body:
        raise SkillError(
            skill_md,
            f"instructions are {len(body)} characters, more than {max_body} "
            "(FANBOT_SKILLS__MAX_BODY_CHARS)",
        )
    return Skill(name=name, description=description.strip(), root=root, body=body, files=files)


def _text_key(path: Path, data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise SkillError(path, f"front matter has no {key}")
    if not isinstance(value, str):
        raise SkillError(path, f"front matter's {key} is not text")
    return value.strip()


def _files(folder: Path, root: Path, *, max_bytes: int, max_files: int) -> tuple[str, ...]:
    """The skill's files relative to ``root``, bounded; a symlink that leaves the skill
    refuses it, one that stays inside is listed under its own name (a symlinked folder
    inside is not walked: its files are listed where they are)."""
    files: list[str] = []
    total = 0
    for here, subdirs, names in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for sub in [d for d in subdirs if Path(here, d).is_symlink()]:
            _inside(Path(here, sub), root, folder)
            subdirs.remove(sub)
        for name in sorted(n for n in names if not n.startswith(".")):
            path = Path(here, name)
            real = _inside(path, root, folder) if path.is_symlink() else path
            if not real.is_file():
                continue  # a dangling link inside the skill, a socket, a FIFO
            total += real.stat().st_size
            files.append(path.relative_to(root).as_posix())
            if len(files) > max_files:
                raise SkillError(
                    folder, f"holds more than {max_files} files (FANBOT_SKILLS__MAX_FILES)"
                )
            if total > max_bytes:
                raise SkillError(
                    folder,
                    f"holds more than {units.size(max_bytes)} (FANBOT_SKILLS__MAX_SKILL_BYTES)",
                )
    return tuple(sorted(files))


def _inside(link: Path, root: Path, folder: Path) -> Path:
    """Where the symlink ``link`` leads; :class:`SkillError` when that leaves the skill."""
    real = link.resolve()
    if not real.is_relative_to(root):
        shown = folder / link.relative_to(root)
        raise SkillError(shown, f"is a symlink to {real}, outside the skill")
    return real


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
