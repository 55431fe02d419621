"""The session workspace: files a main agent and its subagents share, in one Redis hash.

Fields are canonical paths (``/notes/a.md``) holding raw bytes, so every worker host sees
the same files and binary content (attachments, build outputs) round-trips. Two
bookkeeping fields cannot be paths, since every path starts with ``/``: ``#bytes`` (the
sum of path and content lengths) and ``#files``. Each write and delete is one Lua script,
so runs writing at once on any host cannot push the session past its budgets, and each
write refreshes the hash's expiry to the session's retention. One key means the files and
their bookkeeping expire together.

Paths are virtual: :func:`normalize_path` roots them at the workspace and refuses any that
would climb out of it; no host path is ever derived from one here.

Errors (their text is for the model)::

    ToolError
    └── WorkspaceError       an invalid path, a file where a directory is needed, binary
        ├── WorkspaceFull    a budget: file size, session bytes, file count
        ├── FileExists       a create found the file
        └── FileChanged      a compare-and-set found other content (another run wrote it)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from bot.errors import ToolError
from bot.keys import Keys, glob_escape
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner
from bot.text import units

MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255  # NAME_MAX: a sandbox copy writes each name as a host file name
MAX_DEPTH = 32
_BYTES, _FILES = "#bytes", "#files"

# ARGV: path, data, max_file, max_bytes, max_files, ttl_ms, expect ("" any, "absent", or
# the sha1 of the content it must replace: an edit's compare-and-set), the SCAN pattern of
# paths below it, then its ancestors. As on a disk, a new path may neither sit below a
# file nor be a directory already: a sandbox's copy of the workspace must be writable.
_PUT = """
local path, data = ARGV[1], ARGV[2]
if #data > tonumber(ARGV[3]) then return {'too_big', #data} end
local current = redis.call('HGET', KEYS[1], path)
local expect = ARGV[7]
if expect == 'absent' and current then return {'exists', 0} end
if expect ~= '' and expect ~= 'absent' then
  if not current or redis.sha1hex(current) ~= expect then return {'changed', 0} end
end
local old = 0
if current then old = #path + #current end
local total = tonumber(redis.call('HGET', KEYS[1], '#bytes') or '0')
local after = total - old + #path + #data
if after > total and after > tonumber(ARGV[4]) then return {'full', total} end
local files = tonumber(redis.call('HGET', KEYS[1], '#files') or '0')
if not current then
  if files >= tonumber(ARGV[5]) then return {'too_many', files} end
  for i = 9, #ARGV do
    if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then return {'under_file', i - 9} end
  end
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', KEYS[1], cursor, 'MATCH', ARGV[8], 'COUNT', 1000)
    if #page[2] > 0 then return {'is_dir', 0} end
    cursor = page[1]
  until cursor == '0'
  files = files + 1
end
redis.call('HSET', KEYS[1], path, data, '#bytes', after, '#files', files)
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'ok', after}
"""

# ARGV: path, expect ("" any, else the sha1 of the content it must remove).
_DELETE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if ARGV[2] ~= '' and redis.sha1hex(current) ~= ARGV[2] then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[1], '#bytes', -(#ARGV[1] + #current))
redis.call('HINCRBY', KEYS[1], '#files', -1)
return 1
"""

HASHES_LUA = """
local function file_hashes(key, pattern)
  local out, cursor = {}, '0'
  repeat
    local page = redis.call('HSCAN', key, cursor, 'MATCH', pattern, 'COUNT', 1000)
    for i = 1, #page[2], 2 do
      table.insert(out, page[2][i])
      table.insert(out, redis.sha1hex(page[2][i + 1]))
    end
    cursor = page[1]
  until cursor == '0'
  return out
end
"""
"""``file_hashes(key, pattern)``: path, sha1, path, sha1... of the files of the workspace
hash ``key`` matching the SCAN ``pattern`` (no content leaves Redis); for scripts of other
owners that snapshot a workspace in their own transaction (a run's start)."""

_HASHES = HASHES_LUA + "return file_hashes(KEYS[1], ARGV[1])\n"


class WorkspaceError(ToolError):
    """A workspace call cannot be done; the text is for the model."""


class WorkspaceFull(WorkspaceError):
    """A write would pass a budget: file size, session bytes or file count."""


class FileExists(WorkspaceError):
    """A create found the file there already."""


class FileChanged(WorkspaceError):
    """A compare-and-set found other content than it was to replace."""


def below(directory: str) -> str:
    """The SCAN pattern of the files below ``directory`` (see :data:`HASHES_LUA`)."""
    return glob_escape(normalize_path(directory, directory=True).rstrip("/")) + "/*"


def normalize_path(path: str, *, directory: bool = False) -> str:
    """The canonical form of a workspace path: ``notes/a.md``, ``/notes/a.md`` and
    ``./x/../notes/a.md`` all give ``/notes/a.md``.

    Args:
        path: As the model wrote it.
        directory: Allow the workspace root (``/``, or an empty path) itself.

    Raises:
        WorkspaceError: It climbs out of the workspace, holds a control character, is too
            long or too deep, or names the root where a file is needed.
    """
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise WorkspaceError("path holds a control character (NUL, newline, ...)")
    if path.startswith("~"):
        raise WorkspaceError(
            f"{_show(path)}: paths are inside the workspace; '~' means nothing here"
        )
    if len(path.encode()) > MAX_PATH_BYTES:
        raise WorkspaceError(f"path is longer than {MAX_PATH_BYTES} bytes")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise WorkspaceError(f"{_show(path)} leaves the workspace")
            parts.pop()
        elif len(part.encode()) > MAX_NAME_BYTES:
            raise WorkspaceError(f"a name in {_show(path)} is longer than {MAX_NAME_BYTES} bytes")
        else:
            parts.append(part)
    if len(parts) > MAX_DEPTH:
        raise WorkspaceError(f"{_show(path)} is deeper than {MAX_DEPTH} directories")
    if not parts and not directory:
        raise WorkspaceError(f"{_show(path)} names the workspace root, not a file")
    return "/" + "/".join(parts)


def _show(path: str) -> str:
    """``path`` quoted for a message, its middle cut when long."""
    return repr(path if len(path) <= 80 else path[:40] + "…" + path[-30:])


def content_hash(data: bytes) -> str:
    """What the scripts compare for a compare-and-set (Redis' ``sha1hex``)."""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Limits:
    """A session workspace's budgets and retention."""

    max_file_bytes: int = 1_000_000
    max_bytes: int = 32_000_000
    max_files: int = 1_000
    ttl_seconds: float = 7 * 86_400


class Workspace(RedisOwner):
    """Owner of the ``workspace:{sessionKey}`` hashes.

    Args:
        redis: Sync client.
        keys: Key builder.
        limits: Budgets and retention, the same for every session.
    """

    _put = Lua(_PUT)
    _delete = Lua(_DELETE)
    _hashes = Lua(_HASHES)

    def __init__(self, *, redis: redis.Redis, keys: Keys, limits: Limits) -> None:
        super().__init__(redis=redis, keys=keys)
        self.limits = limits

    def put_bytes(
        self, session: str, path: str, data: bytes, *, create: bool = False, replaces: str = ""
    ) -> int:
        """Store ``data`` at ``path``; returns the session's bytes in use after.

        Args:
            create: Refuse when the file exists.
            replaces: Refuse unless the current content has this :func:`content_hash`.

        Raises:
            WorkspaceFull: A budget would be passed (nothing is written).
            WorkspaceError: The path is invalid, or ``create``/``replaces`` did not hold.
        """
        path = normalize_path(path)
        lim = self.limits
        expect = "absent" if create else replaces
        ancestors = _ancestors(path)
        limits = (lim.max_file_bytes, lim.max_bytes, lim.max_files, int(lim.ttl_seconds * 1000))
        args: list[bytes | str | int] = [path, data, *limits, expect, glob_escape(path) + "/*"]
        status, number = self._put(keys=[self.keys.workspace(session)], args=[*args, *ancestors])
        if as_text(status) == "under_file":
            raise WorkspaceError(f"{path}: {ancestors[int(number)]} is a file, not a directory")
        return _put_result(as_text(status), int(number), path=path, size=len(data), lim=lim)

    def put_text(
        self, session: str, path: str, text: str, *, create: bool = False, replaces: str = ""
    ) -> int:
        """:meth:`put_bytes` of ``text`` as UTF-8."""
        return self.put_bytes(session, path, text.encode(), create=create, replaces=replaces)

    def get_bytes(self, session: str, path: str) -> bytes | None:
        raw = self.redis.hget(self.keys.workspace(session), normalize_path(path))
        return None if raw is None else _as_bytes(raw)

    def get_text(self, session: str, path: str) -> str | None:
        """The file as UTF-8 text; None when it does not exist.

        Raises:
            WorkspaceError: It holds bytes that are not UTF-8 text.
        """
        data = self.get_bytes(session, path)
        return None if data is None else decode_text(normalize_path(path), data)

    def delete(self, session: str, path: str, *, replaces: str = "") -> bool:
        """Remove ``path``; False when there was no such file.

        Raises:
            WorkspaceError: ``replaces`` is given and the content no longer hashes to it.
        """
        path = normalize_path(path)
        done = int(self._delete(keys=[self.keys.workspace(session)], args=[path, replaces]))
        if done < 0:
            raise FileChanged(f"{path} changed meanwhile (another run wrote it); kept it")
        return done == 1

    def paths(self, session: str) -> list[str]:
        """Every file's path, sorted."""
        names = (as_text(f) for f in self.redis.hkeys(self.keys.workspace(session)))
        return sorted(n for n in names if n.startswith("/"))

    def hashes(self, session: str, directory: str) -> dict[str, str]:
        """Path -> :func:`content_hash` of every file below ``directory`` (hashed in Redis)."""
        flat = self._hashes(keys=[self.keys.workspace(session)], args=[below(directory)])
        return {as_text(flat[i]): as_text(flat[i + 1]) for i in range(0, len(flat), 2)}

    def sizes(self, session: str, paths: list[str]) -> list[int]:
        key = self.keys.workspace(session)
        with self.redis.pipeline(transaction=False) as pipe:
            for path in paths:
                pipe.hstrlen(key, path)
            return [int(n) for n in pipe.execute()]

    def read_many(self, session: str, paths: list[str], *, batch: int = 50) -> Iterator[bytes]:
        """The contents of ``paths`` (existing files, in order), a batch at a time."""
        key = self.keys.workspace(session)
        for start in range(0, len(paths), batch):
            for raw in self.redis.hmget(key, paths[start : start + batch]):
                yield b"" if raw is None else _as_bytes(raw)

    def files(self, session: str) -> Iterator[tuple[str, bytes]]:
        """Every file, a batch at a time (a 32 MB workspace is never held at once here)."""
        for field, value in self.redis.hscan_iter(self.keys.workspace(session), count=100):
            name = as_text(field)
            if name.startswith("/"):
                yield name, _as_bytes(value)

    def usage(self, session: str) -> tuple[int, int]:
        """``(bytes, files)`` in use."""
        raw = self.redis.hmget(self.keys.workspace(session), [_BYTES, _FILES])
        return int(raw[0] or 0), int(raw[1] or 0)


def _as_bytes(value: bytes | str) -> bytes:
    """A reply as bytes, whatever the client's ``decode_responses``."""
    return value.encode() if isinstance(value, str) else value


def decode_text(path: str, data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise WorkspaceError(
            f"{path} is binary ({units.size(len(data), precise=True)}), not UTF-8 text; "
            "the file tools read and write text only"
        ) from None


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]``."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _put_result(status: str, number: int, *, path: str, size: int, lim: Limits) -> int:
    if status == "ok":
        return number
    if status == "too_big":
        most = units.size(lim.max_file_bytes, precise=True)
        raise WorkspaceFull(
            f"{path}: {units.size(size, precise=True)} is more than a file may hold ({most})"
        )
    if status == "full":
        used, most = units.size(number, precise=True), units.size(lim.max_bytes, precise=True)
        raise WorkspaceFull(
            f"{path}: the workspace is full ({used} of {most} used); make room or write less"
        )
    if status == "too_many":
        raise WorkspaceFull(f"{path}: the workspace holds its maximum of {lim.max_files} files")
    if status == "exists":
        raise FileExists(f"{path} already exists")
    if status == "is_dir":
        raise WorkspaceError(f"{path} is a directory")
    raise FileChanged(f"{path} changed meanwhile (another run wrote it); read it again")
