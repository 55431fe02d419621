"""``load_skill`` and the read-only ``/skills`` overlay of the file tools (docs/skills.md).

An agent sees the skills in ``ToolContext.skills`` (:func:`bot.agent.skills.skills_for`).
``load_skill(name)`` returns one's ``SKILL.md`` body and the virtual paths of its files;
``ls``, ``read_file`` and ``grep`` read those files from the worker's disk at
``/skills/<name>/<path>`` (:class:`SkillFiles`), and ``write_file``/``edit_file`` there are
refused. A path is read only when it is one of the files the loader listed, and only while
it still resolves inside its skill's folder (:func:`bot.agent.skills.skill_file`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import BaseModel, Field

from bot.agent.context import ToolContext
from bot.agent.skills import SKILLS_ROOT, Skill, SkillError, skill_file
from bot.agent.tools import Tool
from bot.config import Settings
from bot.errors import ToolError
from bot.runs.type_registry import subagent_types
from bot.store.workspace import WorkspaceError

LOAD_SKILL = "load_skill"


def is_skill_path(path: str) -> bool:
    """Whether a normalized path is ``/skills`` or below it."""
    return path == SKILLS_ROOT or path.startswith(SKILLS_ROOT + "/")


def refuse_write(path: str) -> WorkspaceError:
    """The error of a write under ``/skills``."""
    return WorkspaceError(
        f"skills are read-only: {path} cannot be written or edited; "
        "write your own files elsewhere in the workspace"
    )


@dataclass(frozen=True)
class SkillFiles:
    """The files of the skills an agent sees, by virtual path (``/skills/<name>/<path>``)."""

    skills: tuple[Skill, ...]
    max_bytes: int

    def paths(self) -> list[str]:
        """Every file's virtual path, sorted."""
        return sorted(p for s in self.skills for p in s.virtual_paths())

    def sizes(self, paths: list[str]) -> list[int]:
        return [len(self.get_bytes(p) or b"") for p in paths]

    def read_many(self, paths: list[str]) -> Iterator[bytes]:
        for path in paths:
            yield self.get_bytes(path) or b""

    def get_bytes(self, path: str) -> bytes | None:
        """The file at ``path``; None when no visible skill has it.

        Raises:
            WorkspaceError: It left its skill's folder or grew past the skill limit since
                it was loaded.
        """
        found = self._locate(path)
        if found is None:
            return None
        skill, rel = found
        try:
            return skill_file(skill, rel, max_bytes=self.max_bytes).read_bytes()
        except (SkillError, OSError) as exc:
            raise WorkspaceError(f"{path} cannot be read: {_why(exc)}") from None

    def _locate(self, path: str) -> tuple[Skill, str] | None:
        name, _, rel = path.removeprefix(SKILLS_ROOT + "/").partition("/")
        skill = next((s for s in self.skills if s.name == name), None)
        if skill is None or rel not in skill.files:
            return None
        return skill, rel


def skill_files(ctx: ToolContext) -> SkillFiles:
    return SkillFiles(ctx.skills, ctx.deps.settings.skills.max_skill_bytes)


class LoadSkillArgs(BaseModel):
    name: str = Field(
        min_length=1, max_length=64, description="The skill's name, as listed under Skills"
    )


def _load_skill(ctx: ToolContext, args: LoadSkillArgs) -> str:
    skill = next((s for s in ctx.skills if s.name == args.name.strip()), None)
    if skill is None:
        names = ", ".join(s.name for s in ctx.skills)
        raise ToolError(
            f"no skill {args.name!r}; "
            + (f"the skills here are: {names}" if names else "no skills are available here")
        )
    return "\n".join(
        [
            f"# Skill {skill.name}",
            "",
            f"Its files (read-only; read them with read_file, list them with ls; a path in "
            f"the instructions is relative to {skill.virtual_root}/):",
            *skill.virtual_paths(),
            "",
            "## Instructions",
            "",
            skill.body,
        ]
    )


def configured_anywhere(settings: Settings) -> bool:
    """Whether any agent or type may see a skill (else ``load_skill`` is not offered)."""
    return bool(
        settings.skills.dirs
        or any(a.skills for a in settings.agents.values())
        or any(t.skills for t in subagent_types(settings).values())
    )


def skill_tools(settings: Settings) -> list[Tool]:
    """``load_skill`` when skills are configured; an agent that sees none is not given it
    (:func:`for_agent`)."""
    if not configured_anywhere(settings):
        return []
    return [
        Tool(
            name=LOAD_SKILL,
            args=LoadSkillArgs,
            run=_load_skill,
            repeat_safe=True,
            description="Load a skill listed under Skills in your instructions: returns its "
            f"instructions and the paths of its files (read-only, under {SKILLS_ROOT}/).",
        )
    ]


def for_agent(tools: list[Tool], skills: tuple[Skill, ...] | list[Skill]) -> list[Tool]:
    """``tools`` without ``load_skill`` when the agent sees no skill."""
    return tools if skills else [t for t in tools if t.name != LOAD_SKILL]


def _why(exc: BaseException) -> str:
    if isinstance(exc, SkillError):
        return exc.message
    return getattr(exc, "strerror", None) or type(exc).__name__
