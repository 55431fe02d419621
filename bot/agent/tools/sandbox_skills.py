"""Which of a run's skills the sandbox mounts at ``/skills/<name>``, and why not the others.

Each skill the run sees (docs/skills.md) is bound read-only by bwrap, which opens the
folder as the uid it runs as. A worker that is not root loaded the skill itself, so that uid
can read it. A root worker starts bwrap as ``sandbox.uid``, which may not get through the
directories on the way (a skill under ``/root``, a ``0700`` parent): such a skill is left
out with the reason, instead of the whole command failing on bwrap's "Can't find source
path".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bot.agent.skills import SKILLS_ROOT, Skill

_SEARCH, _READ = 1, 4  # the x and r bits of one rwx triplet


@dataclass(frozen=True, kw_only=True)
class SkillMounts:
    """The folders to bind, by skill name, and one line per skill left out."""

    folders: dict[str, Path] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def skill_mounts(skills: Iterable[Skill], *, uid: int | None) -> SkillMounts:
    """The skills bwrap, started as host ``uid`` (None: the worker's own), can bind."""
    mounts = SkillMounts()
    for skill in skills:
        why = blocked(skill.root, uid)
        if why:
            mounts.left_out.append(f"{SKILLS_ROOT}/{skill.name} ({why})")
        else:
            mounts.folders[skill.name] = skill.root
    return mounts


def blocked(folder: Path, uid: int | None) -> str:
    """Why host ``uid`` (group ``uid``, no other groups: how the sandbox is started) cannot
    list ``folder``, or "" when it can (None: the worker's own uid, which loaded it; the
    folder must still be there). Reads permission bits only."""
    if uid is None:
        return "" if folder.is_dir() else f"{folder} is gone"
    for path in (folder, *folder.parents):
        try:
            info = path.stat()
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
        need = _SEARCH | _READ if path == folder else _SEARCH
        if _granted(info, uid) & need != need:
            return f"{path} is closed to uid {uid}, the sandbox's (FANBOT_SANDBOX__UID)"
    return ""


def _granted(info: os.stat_result, uid: int) -> int:
    """The rwx triplet that applies to ``uid`` (owner, else group, else others)."""
    shift = 6 if info.st_uid == uid else 3 if info.st_gid == uid else 0
    return (stat.S_IMODE(info.st_mode) >> shift) & 7
