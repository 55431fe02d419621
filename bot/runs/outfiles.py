"""Files out of the thread: which ``out/`` files a run wrote, for its announce.

When a run starts, its start (:func:`out_snapshot`) keeps in its run hash the content hash
of every file under ``out/`` in the session workspace (hashed inside Redis, no content
moves). At finalize, :func:`announce_files` hashes ``out/`` again: a path that is new or
holds other content was written during the run. Every writer counts (``write_file``,
``edit_file``, a sandboxed ``execute`` copying back), with no hook in any tool, and it works
from a backup finalizer on another host. Runs of one session that overlap in time and write
the same workspace can each see the other's ``out/`` files; a run that never started has no
snapshot and attaches nothing.
"""

from __future__ import annotations

import enum
import json
import logging

from bot.attachments import OUT_PREFIX, changed_paths, out_files
from bot.deps import Deps
from bot.store.runs import OutSnapshot
from bot.store.workspace import below
from bot.types import RunRecord

log = logging.getLogger(__name__)

SNAPSHOT_FIELD = "out_before"


def out_snapshot() -> OutSnapshot:
    """What a run's start keeps of ``out/`` (:meth:`bot.store.runs.RunsRegistry.start`
    takes it in the same script as the run's start)."""
    return OutSnapshot(pattern=below(OUT_PREFIX), field=SNAPSHOT_FIELD)


class Unread(enum.Enum):
    """The snapshot was not read with the record: :func:`announce_files` reads it."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


def announce_files(
    deps: Deps, record: RunRecord, *, snapshot: str | Unread | None = UNREAD
) -> tuple[tuple[str, ...], list[str]]:
    """The ``out/`` paths ``record`` wrote that fit the announce, and notes on the rest.

    ``snapshot``: the run hash's :data:`SNAPSHOT_FIELD`, when the caller read it with the
    record (one round trip fewer; ``None``: the hash has none). Never raises: a finalizer
    must end the run whatever the workspace says.
    """
    try:
        raw = deps.runs.field(record.run_id, SNAPSHOT_FIELD) if snapshot is UNREAD else snapshot
        if raw is None:
            return (), []
        before = json.loads(raw)
        changed = changed_paths(before, deps.workspace.hashes(record.session_key, OUT_PREFIX))
        sizes = dict(zip(changed, deps.workspace.sizes(record.session_key, changed), strict=True))
    except Exception:
        log.warning("run %s: cannot list its out/ files", record.run_id, exc_info=True)
        return (), []
    limits = deps.settings.attachments
    chosen, notes = out_files(
        changed, sizes, max_files=limits.max_out_files, max_bytes=limits.max_out_bytes
    )
    return tuple(chosen), notes
