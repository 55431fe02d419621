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

import json
import logging

from bot.attachments import OUT_PREFIX, changed_paths, out_files
from bot.deps import Deps
from bot.store.runs import OutFiles, OutSnapshot
from bot.store.workspace import below
from bot.types import RunRecord

log = logging.getLogger(__name__)

SNAPSHOT_FIELD = "out_before"


def out_snapshot() -> OutSnapshot:
    """What a run's start keeps of ``out/`` (:meth:`bot.store.runs.RunsRegistry.start`
    takes it in the same script as the run's start)."""
    return OutSnapshot(pattern=below(OUT_PREFIX), field=SNAPSHOT_FIELD)


def announce_files(
    deps: Deps, record: RunRecord, *, seen: OutFiles | None = None
) -> tuple[tuple[str, ...], list[str]]:
    """The ``out/`` paths ``record`` wrote that fit the announce, and notes on the rest.

    ``seen``: the snapshot and the files now, when the caller read them with the record
    (:meth:`~bot.store.runs.RunsRegistry.get_for_end`; one round trip before the announce's
    write instead of three). Never raises: a finalizer must end the run whatever the
    workspace says.
    """
    try:
        raw = deps.runs.field(record.run_id, SNAPSHOT_FIELD) if seen is None else seen.before
        if raw is None:
            return (), []
        before = json.loads(raw)
        now = deps.workspace.hashes(record.session_key, OUT_PREFIX) if seen is None else seen.now
        changed = changed_paths(before, now)
        sizes = dict(zip(changed, deps.workspace.sizes(record.session_key, changed), strict=True))
    except Exception:
        log.warning("run %s: cannot list its out/ files", record.run_id, exc_info=True)
        return (), []
    limits = deps.settings.attachments
    chosen, notes = out_files(
        changed, sizes, max_files=limits.max_out_files, max_bytes=limits.max_out_bytes
    )
    return tuple(chosen), notes
