"""How a run is named, and which icon stands for what (pure).

Every place that names a run (its status card, announce, history note, ``/subagents
list|info|log``, the approvals request, the ops page, the console, ``fanbot subagents
list``, the texts that answer a command) calls :func:`run_title`, so a run is ``#2``
everywhere. Its few forms, each kept for the place that has always shown it:

=====================================  ===============================================
call                                   text
=====================================  ===============================================
``run_title(r)``                       ``Subagent #2 "Django research"`` (announce)
``run_title(r, kind="tag")``           ``[explore] Subagent #2 "Django research"`` (card)
``run_title(r, kind="after")``         ``Subagent #2 "Django research" (explore)``
``run_title(r, noun="subagent",``      ``subagent #2 · Django research`` (command replies)
``name="dotted")``
``run_title(r, noun="", name="plain")``  ``#2 Django research`` (ops page)
``run_title(r, name="none")``          ``Subagent #2``
``run_title(r, noun="", kind="colon",``  ``#2 explore: Django research`` (a child's thread)
``name="folded", limit=96)``
``run_title(r, noun="", name="raw")``  ``#2 <label or task as written>`` (approvals)
``run_title(r, noun="subagent",``      ``subagent #2 <label, else the task's first 40>``
``name="brief")``                      (the job's description)
=====================================  ===============================================

The name is the run's label, else its task. In the *quoted*, *dotted* and *plain* forms
it is folded to one line, backticks made single quotes (untrusted text cannot break a code
span) and cut to :data:`NAME_CHARS`; *quoted* also makes double quotes single.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Literal, Protocol

from bot.types import RunStatus

NAME_CHARS = 60
"""A run's name (label, else task) is cut to this many characters wherever it is shown."""

NameForm = Literal["quoted", "dotted", "plain", "folded", "raw", "brief", "none"]
KindForm = Literal["none", "tag", "after", "colon"]
BRIEF_TASK_CHARS = 40


class Titled(Protocol):
    """What :func:`run_title` reads of a run (a :class:`~bot.types.RunRecord` has it)."""

    @property
    def seq(self) -> int: ...
    @property
    def subagent_type(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def task(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class RunRef:
    """A run known only by its number (and perhaps its type), for texts written before or
    without its record."""

    seq: int
    subagent_type: str = ""
    label: str = ""
    task: str = ""


def one_line(text: str, limit: int = NAME_CHARS) -> str:
    """Whitespace folded, backticks made single quotes (so untrusted text cannot break a
    code span), cut to ``limit`` characters with "…"."""
    clean = " ".join(text.split()).replace("`", "'")
    return clean if len(clean) <= limit else clean[: limit - 1].rstrip() + "…"


def run_name(record: Titled, limit: int = NAME_CHARS) -> str:
    """The run's label, else its task, on one line (double quotes made single, since
    titles quote it)."""
    return one_line(record.label or record.task, limit).replace('"', "'") or "(no task)"


def run_title(
    run: Titled | int,
    *,
    noun: str = "Subagent",
    name: NameForm = "quoted",
    kind: KindForm = "none",
    limit: int | None = None,
) -> str:
    """How ``run`` (a record, or just its number) is named; the forms are in the module's
    table. ``limit`` cuts the whole title to that many characters, the last one "…"."""
    ref = RunRef(seq=run) if isinstance(run, int) else run
    head = f"{noun} #{ref.seq}" if noun else f"#{ref.seq}"
    if kind == "tag":
        head = f"[{ref.subagent_type}] {head}"
    elif kind == "colon":
        head = f"{head} {ref.subagent_type}:"
    shown = head + _name_part(ref, name)
    if kind == "after":
        shown += f" ({ref.subagent_type})"
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return shown


def _name_part(ref: Titled, name: NameForm) -> str:
    written = ref.label or ref.task
    if name == "quoted":
        return f' "{run_name(ref)}"'
    if name == "dotted":
        return f" · {run_name(ref)}"
    if name == "plain":
        return f" {run_name(ref)}"
    if name == "folded":
        return " " + " ".join(written.split())
    if name == "raw":
        return f" {written}"
    if name == "brief":
        return f" {ref.label or ref.task[:BRIEF_TASK_CHARS]}"
    return ""


ICONS: MappingProxyType[RunStatus, str] = MappingProxyType(
    {
        RunStatus.QUEUED: "⏳",
        RunStatus.RUNNING: "🏃",
        RunStatus.SUCCESS: "✅",
        RunStatus.ERROR: "❌",
        RunStatus.TIMEOUT: "⏱️",
        RunStatus.STOPPED: "⏹️",
        RunStatus.UNKNOWN: "❓",
    }
)
"""A run's status as an icon (lists, info, announces, a card's last line)."""


class Icon(StrEnum):
    """The icons that are not a run's status, by what they mean (a glyph that is also a
    status's is taken from :data:`ICONS`, so each is written once)."""

    WORKING = ICONS[RunStatus.QUEUED]
    """A status card while its run waits or works."""
    STOPPED = ICONS[RunStatus.STOPPED]
    TIMED_OUT = ICONS[RunStatus.TIMEOUT]
    DELIVERED = ICONS[RunStatus.SUCCESS]
    APPROVED = ICONS[RunStatus.SUCCESS]
    DENIED = ICONS[RunStatus.ERROR]
    TOOL = "🔧"
    WARNING = "⚠️"
    STARTED = "🚀"
    STEERED = "📨"
    FOLLOW_UP = "↪️"
    THREAD = "🧵"
    SCHEDULE = "⏰"
    REMOVED = "🗑️"
    APPROVAL = "🔐"
    EXPIRED = "⌛"
    RESUMED = "↻"
    WAITING = "⏸️"
    ESTIMATE = "💰"


def icon(status: RunStatus | str) -> str:
    """The status's icon; ``•`` for anything that is not a status."""
    try:
        return ICONS[RunStatus(status)]
    except ValueError:
        return "•"
