"""File tools over the session workspace: ``ls``, ``read_file``, ``write_file``,
``edit_file``, ``grep``, with deepagents' names, arguments and habits.

Files live in Redis (:class:`~bot.store.workspace.Workspace`), keyed by the requester
session (``ctx.workspace``), so a main agent and every subagent it spawned see the same
files from any worker host. Paths are virtual and rooted at the workspace (``a.md`` is
``/a.md``). ``write_file`` creates and never overwrites, as in deepagents: runs working
at once in one workspace cannot silently clobber each other's files; ``edit_file`` is a
compare-and-set, so two edits of one file never lose one.

Under ``/skills`` the tools read the skills the agent sees instead, read-only, from the
worker's disk (:mod:`bot.agent.tools.skills`; docs/skills.md).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import AliasChoices, BaseModel, Field

from bot.agent.context import ToolContext
from bot.agent.skills import SKILLS_ROOT
from bot.agent.tools import Tool
from bot.agent.tools.globs import Glob, compile_glob
from bot.agent.tools.skills import is_skill_path, refuse_write, skill_files
from bot.config import Settings
from bot.store.workspace import (
    FileChanged,
    FileExists,
    Workspace,
    WorkspaceError,
    content_hash,
    decode_text,
    normalize_path,
)
from bot.text import units
from bot.text.clip import cut_note

MAX_LINE_CHARS = 2_000
MAX_GREP_LINES = 500
MAX_GLOB_STARS = 8
_EDIT_ATTEMPTS = 40
_EDIT_JITTER_SECONDS = 0.01  # spreads retries so concurrent editors stop colliding


def _file_path(description: str) -> str:
    # The schema names it file_path (deepagents); a model that says path is understood.
    return Field(  # type: ignore[no-any-return]
        min_length=1, validation_alias=AliasChoices("file_path", "path"), description=description
    )


class LsArgs(BaseModel):
    path: str = Field("/", description="Directory to list, e.g. / or /notes")


class ReadFileArgs(BaseModel):
    file_path: str = _file_path("File to read, e.g. /notes/a.md")
    offset: int = Field(0, ge=0, description="Line to start from (0-based)")
    limit: int = Field(2000, ge=1, le=10_000, description="Most lines to return")


class WriteFileArgs(BaseModel):
    file_path: str = _file_path("New file to create, e.g. /notes/a.md")
    content: str = Field(description="The whole text of the file")


class EditFileArgs(BaseModel):
    file_path: str = _file_path("File to edit")
    old_string: str = Field(min_length=1, description="Exact text to replace")
    new_string: str = Field(description="Text to put in its place")
    replace_all: bool = Field(False, description="Replace every occurrence, not just one")


class GrepArgs(BaseModel):
    pattern: str = Field(min_length=1, max_length=1_000, description="Literal text to find")
    path: str | None = Field(None, description="Directory or file to search (default /)")
    glob: str | None = Field(None, max_length=200, description="Only files matching, e.g. *.py")
    output_mode: Literal["files_with_matches", "content", "count"] = "files_with_matches"


class _Files(Protocol):
    """Where the file tools read: the session workspace, or the skills under ``/skills``."""

    def paths(self) -> list[str]: ...
    def sizes(self, paths: list[str]) -> list[int]: ...
    def read_many(self, paths: list[str]) -> Iterator[bytes]: ...
    def get_bytes(self, path: str) -> bytes | None: ...


@dataclass(frozen=True)
class _Workspace:
    store: Workspace
    session: str

    def paths(self) -> list[str]:
        return self.store.paths(self.session)

    def sizes(self, paths: list[str]) -> list[int]:
        return self.store.sizes(self.session, paths)

    def read_many(self, paths: list[str]) -> Iterator[bytes]:
        return self.store.read_many(self.session, paths)

    def get_bytes(self, path: str) -> bytes | None:
        return self.store.get_bytes(self.session, path)


def _source(ctx: ToolContext, path: str) -> _Files:
    """The skills for a path under ``/skills``, else the workspace."""
    if is_skill_path(path):
        return skill_files(ctx)
    return _Workspace(ctx.deps.workspace, ctx.workspace)


def _ls(ctx: ToolContext, args: LsArgs) -> str:
    root = normalize_path(args.path, directory=True)
    store = _source(ctx, root)
    paths = store.paths()
    if root in paths:
        return f"{root}  {units.size(store.sizes([root])[0], precise=True)}"
    files, dirs = _children(root, paths)
    if root == "/" and ctx.skills:  # the skills' read-only folder (docs/skills.md)
        dirs[SKILLS_ROOT] = len(skill_files(ctx).paths())
    if not files and not dirs:
        if root == SKILLS_ROOT:
            return "(no skills here)"
        return "(the workspace is empty)" if root == "/" else f"error: no directory {root}"
    lines = [f"{d}/  ({n} file{'s' * (n != 1)})" for d, n in sorted(dirs.items())]
    sizes = store.sizes(files)
    lines += [f"{p}  {units.size(s, precise=True)}" for p, s in zip(files, sizes, strict=True)]
    return "\n".join(lines)


def _children(root: str, paths: list[str]) -> tuple[list[str], dict[str, int]]:
    """The files directly under ``root`` and its subdirectories with their file counts."""
    prefix = root.rstrip("/") + "/"
    files: list[str] = []
    dirs: dict[str, int] = {}
    for path in paths:
        if not path.startswith(prefix):
            continue
        head, sep, _ = path[len(prefix) :].partition("/")
        if sep:
            dirs[prefix + head] = dirs.get(prefix + head, 0) + 1
        else:
            files.append(path)
    return files, dirs


def _read_file(ctx: ToolContext, args: ReadFileArgs) -> str:
    path = normalize_path(args.file_path)
    data = _source(ctx, path).get_bytes(path)
    if data is None:
        return f"error: file {path} not found"
    text = decode_text(path, data)
    if not text:
        return "System reminder: file exists but has empty contents"
    lines = text.splitlines()
    if args.offset >= len(lines):
        return f"error: line offset {args.offset} is past the end of {path} ({len(lines)} lines)"
    shown = lines[args.offset : args.offset + args.limit]
    out = [f"{args.offset + i + 1:6d}\t{_cut(line)}" for i, line in enumerate(shown)]
    rest = len(lines) - args.offset - len(shown)
    if rest > 0:
        out.append(f"[… {rest} more lines: read_file with offset={args.offset + len(shown)}]")
    return "\n".join(out)


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[:MAX_LINE_CHARS] + " " + cut_note(len(line) - MAX_LINE_CHARS, wording="line")


def _write_file(ctx: ToolContext, args: WriteFileArgs) -> str:
    path = normalize_path(args.file_path)
    if is_skill_path(path):
        raise refuse_write(path)
    try:
        ctx.deps.workspace.put_text(ctx.workspace, path, args.content, create=True)
    except FileExists:
        raise FileExists(
            f"{path} already exists; read it and change it with edit_file, or write to a new path"
        ) from None
    return f"Wrote {path} ({units.size(len(args.content.encode()), precise=True)})"


def _edit_file(ctx: ToolContext, args: EditFileArgs) -> str:
    if args.old_string == args.new_string:
        raise WorkspaceError("old_string and new_string are the same; nothing to change")
    path = normalize_path(args.file_path)
    if is_skill_path(path):
        raise refuse_write(path)
    store = ctx.deps.workspace
    for _ in range(_EDIT_ATTEMPTS):  # another run may write the file between read and write
        data = store.get_bytes(ctx.workspace, path)
        if data is None:
            return f"error: file {path} not found"
        text, count = _replace(path, decode_text(path, data), args)
        try:
            store.put_text(ctx.workspace, path, text, replaces=content_hash(data))
        except FileChanged:
            time.sleep(random.uniform(0, _EDIT_JITTER_SECONDS))
            continue
        return f"Successfully replaced {count} instance(s) of the string in {path}"
    raise WorkspaceError(f"{path} keeps changing under other runs' writes; try again")


def _replace(path: str, text: str, args: EditFileArgs) -> tuple[str, int]:
    count = text.count(args.old_string)
    if count == 0:
        raise WorkspaceError(f"old_string not found in {path}: {args.old_string[:200]!r}")
    if count > 1 and not args.replace_all:
        raise WorkspaceError(
            f"old_string appears {count} times in {path}; give more surrounding "
            "context to make it unique, or set replace_all=true"
        )
    return text.replace(args.old_string, args.new_string), count


def _grep(ctx: ToolContext, args: GrepArgs) -> str:
    root = normalize_path(args.path or "/", directory=True)
    store = _source(ctx, root)
    paths = [p for p in store.paths() if _under(p, root)]
    if args.glob and args.glob.count("*") > MAX_GLOB_STARS:
        # The matcher is linear (bot.agent.tools.globs); this only keeps globs readable.
        raise WorkspaceError(f"glob has more than {MAX_GLOB_STARS} '*'")
    if args.glob:
        compiled = compile_glob(args.glob.lstrip("/"))
        paths = [p for p in paths if _glob_match(args.glob, compiled, p, root)]
    hits: list[str] = []
    for path, lines in _search(store, paths, args.pattern):
        if args.output_mode == "files_with_matches":
            hits.append(path)
        elif args.output_mode == "count":
            hits.append(f"{path}:{len(lines)}")
        else:
            hits.extend(f"{path}:{n}:{line[:300]}" for n, line in lines)
        if len(hits) >= MAX_GREP_LINES:
            return "\n".join([*hits[:MAX_GREP_LINES], "[… more matches: narrow path or glob]"])
    return "\n".join(hits) if hits else f"no matches for {args.pattern!r}"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _search(
    store: _Files, paths: list[str], needle: str
) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """Files holding ``needle`` with their matching lines, in path order. Literal text, not
    a regex: no pattern can make a worker backtrack for minutes."""
    raw_needle = needle.encode()
    for path, data in zip(paths, store.read_many(paths), strict=True):
        if raw_needle not in data:
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError:  # binary: skipped, as grep tools do
            continue
        yield path, [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if needle in ln]


def _glob_match(glob: str, compiled: Glob, path: str, root: str) -> bool:
    """A glob with no ``/`` matches file names (``*.py``); one starting with ``/`` matches
    whole paths; any other matches the path below the search root (``src/**/*.py``)."""
    if "/" not in glob:
        return compiled.match(path.rsplit("/", 1)[-1])
    base = "/" if glob.startswith("/") else root.rstrip("/") + "/"
    return path.startswith(base) and compiled.match(path[len(base) :])


def file_tools(settings: Settings) -> list[Tool]:
    """The workspace file tools (always available: they need only Redis)."""
    return [
        Tool(name="ls", args=LsArgs, run=_ls, repeat_safe=True,
             description="List the files and directories directly under a workspace directory "
             "(the workspace is shared with the main agent and its other subagents; "
             "/skills holds the skills' files, read-only)."),
        Tool(name="read_file", args=ReadFileArgs, run=_read_file, repeat_safe=True,
             untrusted_output=True,
             description="Read a text file from the workspace, numbered like `cat -n`; use "
             "offset and limit to page through long files."),
        Tool(name="write_file", args=WriteFileArgs, run=_write_file,
             description="Create a new text file in the workspace (never overwrites: change "
             "an existing file with edit_file)."),
        Tool(name="edit_file", args=EditFileArgs, run=_edit_file,
             description="Replace exact text in a workspace file. old_string must occur once "
             "unless replace_all is true; copy it from read_file without the line numbers."),
        Tool(name="grep", args=GrepArgs, run=_grep, repeat_safe=True,
             untrusted_output=True,
             description="Find literal text in workspace files; output_mode "
             "files_with_matches (default), content (path:line:text) or count."),
    ]  # fmt: skip
