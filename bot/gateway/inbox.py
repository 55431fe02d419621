"""Ingress' half of "files in": save a message's attachments into the session workspace.

Each downloaded file goes to ``inbox/<name>`` (a name already there gets ``-2``, ``-3``...),
and the turn's text gains a line naming what was saved and what was not, so the agent
reads them with its file tools. A budget the workspace refuses becomes a note, never a
lost message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bot.attachments import INBOX, safe_name, saved_line, turn_line, unique_name
from bot.store.workspace import FileExists, Workspace, WorkspaceError
from bot.types import Attachment

log = logging.getLogger(__name__)

_NAME_TRIES = 20  # a name another delivery took meanwhile: try the next free one


def save_attachments(workspace: Workspace, session: str, attachments: Sequence[Attachment]) -> str:
    """Save ``attachments`` under ``inbox/``; return the lines for the turn's text."""
    prefix = f"/{INBOX}/"
    taken = {p.removeprefix(prefix) for p in workspace.paths(session) if p.startswith(prefix)}
    saved: list[str] = []
    notes: list[str] = []
    for attachment in attachments:
        if attachment.skipped:
            notes.append(f"{attachment.name} ({attachment.skipped})")
            continue
        try:
            path = _put_new(workspace, session, attachment, taken)
        except WorkspaceError as exc:
            log.info("attachment %r not saved: %s", attachment.name, exc)
            notes.append(f"{attachment.name} ({exc})")
            continue
        saved.append(saved_line(path, attachment))
    return turn_line(saved, notes)


def _put_new(workspace: Workspace, session: str, attachment: Attachment, taken: set[str]) -> str:
    base = safe_name(attachment.name)
    for _ in range(_NAME_TRIES):
        name = unique_name(base, taken)
        taken.add(name)
        try:
            workspace.put_bytes(session, f"/{INBOX}/{name}", attachment.data, create=True)
        except FileExists:
            continue
        return f"/{INBOX}/{name}"
    raise WorkspaceError(f"no free name for {base} in {INBOX}/")
