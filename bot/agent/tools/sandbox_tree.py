"""The sandbox's copy of a workspace: written out before a command, read back after.

Reading back trusts nothing the command left behind. Directories are walked by file
descriptor and nothing is opened through a symlink (one pointing at ``/etc/shadow`` must
never be read by the worker), only regular files count, every name must be a valid
workspace path, and sizes are checked before reading. Changes go back to Redis as
compare-and-sets against the copy's starting point, so a file another run changed during
the command is reported, not overwritten.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bot.store.workspace import Workspace, WorkspaceError, content_hash, normalize_path
from bot.text import units

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, kw_only=True)
class Change:
    """One file the command created, modified or deleted."""

    path: str
    kind: Literal["new", "modified", "deleted"]
    data: bytes = b""


@dataclass(frozen=True, kw_only=True)
class Original:
    """A file as the copy started: its content hash, and the stat that shows it untouched
    (the command can set a file's mtime back, never its ctime)."""

    digest: str
    stamp: tuple[int, int, int]


Snapshot = dict[str, Original]


@dataclass(kw_only=True)
class Collected:
    """What the command left: changed files' contents, untouched paths, and what was not
    kept with why."""

    files: dict[str, bytes] = field(default_factory=dict)
    same: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    blind: list[str] = field(default_factory=list)
    """Directories that could not be read: what was in them is not counted as deleted."""

    def unseen(self, path: str) -> bool:
        return not (
            path in self.files
            or path in self.same
            or path in self.skipped
            or any(path.startswith(d) for d in self.blind)
        )


def materialize(files: Iterable[tuple[str, bytes]], root: Path, *, uid: int | None) -> Snapshot:
    """Write the workspace's files under ``root``, owned by ``uid`` (the sandbox's host
    uid; None keeps ours)."""
    digests: dict[str, str] = {}
    for path, data in files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        digests[path] = content_hash(data)
    if uid is not None:
        for entry in (root, *root.rglob("*")):
            os.chown(entry, uid, uid, follow_symlinks=False)
    return {
        p: Original(digest=d, stamp=_stamp(os.stat(root / p.lstrip("/"))))
        for p, d in digests.items()
    }


def _stamp(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns


def collect(root: Path, snapshot: Snapshot, *, max_file_bytes: int, max_bytes: int) -> Collected:
    """What changed under ``root``. Untouched files are not read again, and changed ones
    only up to ``max_bytes`` in all (the workspace cannot take more), so the worker never
    holds more than one workspace's worth."""
    found = Collected()
    budget = max_bytes
    for path, name, dir_fd in _entries(root, found):
        original = snapshot.get(path)
        reason, data = _read(name, dir_fd=dir_fd, limit=max_file_bytes, budget=budget,
                             stamp=original.stamp if original else None)  # fmt: skip
        if reason == _SAME:
            found.same.add(path)
        elif reason:
            found.skipped[path] = reason
        else:
            found.files[path] = data
            budget -= len(data)
    return found


def _entries(root: Path, found: Collected) -> Iterator[tuple[str, str, int]]:
    """``(path, name, dir_fd)`` of every non-directory under ``root``, symlinks included
    (to be refused), invalid names recorded in ``found.skipped``."""

    def unreadable(exc: OSError) -> None:
        found.blind.append("/" + os.path.relpath(str(exc.filename), root).removeprefix(".") + "/")

    for top, dirs, names, dir_fd in os.fwalk(root, follow_symlinks=False, onerror=unreadable):
        rel = os.path.relpath(top, root)
        base = "/" if rel == "." else "/" + rel + "/"
        for name in names + [d for d in dirs if _is_link(name=d, dir_fd=dir_fd)]:
            try:
                if normalize_path(base + name) != base + name:
                    raise WorkspaceError("not a valid workspace path")
            except WorkspaceError as exc:
                found.skipped[repr(base + name)] = str(exc)
                continue
            yield base + name, name, dir_fd


def _is_link(*, name: str, dir_fd: int) -> bool:
    return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)


_SAME = "same"


def _read(
    name: str, *, dir_fd: int, limit: int, budget: int, stamp: tuple[int, int, int] | None
) -> tuple[str, bytes]:
    """``("", content)`` of a changed regular file, :data:`_SAME` for an untouched one,
    else ``(why not, b"")``. Opened without following a symlink, checked before read."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        return ("a symlink" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"), b""
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file", b""
        if _stamp(info) == stamp:
            return _SAME, b""
        if info.st_size > limit:
            big, most = units.size(info.st_size, precise=True), units.size(limit, precise=True)
            return (
                f"{big} is more than a file may hold ({most})",
                b"",
            )
        if info.st_size > budget:
            return "not read back: the changes pass the workspace's size", b""
        data = handle.read(min(limit, budget) + 1)
    if len(data) > min(limit, budget):
        return "grew while it was read back", b""
    return "", data


def changes(snapshot: Snapshot, found: Collected) -> list[Change]:
    """What differs from the copy's starting point. A file that is there but could not be
    read back (a symlink, too big) is not counted as deleted."""
    out = [
        Change(path=p, kind="modified" if p in snapshot else "new", data=d)
        for p, d in sorted(found.files.items())
        if p not in snapshot or snapshot[p].digest != content_hash(d)
    ]
    gone = sorted(p for p in snapshot if found.unseen(p))
    return [Change(path=p, kind="deleted") for p in gone] + out


def apply(
    store: Workspace, session: str, snapshot: Snapshot, todo: list[Change]
) -> tuple[list[str], list[str]]:
    """Write ``todo`` back (deletions first, to make room); returns (done, refused) lines."""
    done: list[str] = []
    refused: list[str] = []
    for change in todo:
        original = snapshot.get(change.path)
        before = original.digest if original else ""
        try:
            if change.kind == "deleted":
                store.delete(session, change.path, replaces=before)
            else:
                store.put_bytes(
                    session, change.path, change.data, create=not before, replaces=before
                )
        except WorkspaceError as exc:
            refused.append(str(exc))
            continue
        size = "" if change.kind == "deleted" else f", {units.size(len(change.data), precise=True)}"
        done.append(f"{change.path} ({change.kind}{size})")
    return done, refused


def tree_usage(root: Path, *, max_entries: int) -> tuple[int, int]:
    """``(bytes, entries)`` under ``root``, stopping once ``max_entries`` is passed."""
    total = entries = 0
    for _top, dirs, names, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in names:
            try:
                total += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
            except OSError:  # removed while we looked: the command is still running
                continue
        entries += len(names) + len(dirs)
        if entries > max_entries:
            break
    return total, entries
