"""The bubblewrap command line of one sandbox, and the host files it binds.

Why each piece of the bwrap line:

* ``--unshare-all`` (user, pid, net, ipc, uts, cgroup): no network but the sandbox's own
  loopback, no host process visible or signalable, no host abstract socket reachable.
* ``--disable-userns``: no nested namespace where the command could mount an unbounded
  tmpfs or reset its limits.
* The pid namespace: killing its pid 1 (:data:`INIT`) kills every process inside,
  fork-bomb children included, and the runner waits until they are gone;
  ``--die-with-parent`` does the same if the worker dies; ``--new-session`` keeps the
  command off any terminal.
* Read-only ``/usr`` (and the ``/bin``, ``/lib`` links or dirs), a handful of ``/etc``
  files and made-up ``passwd``/``group``: no ``/home``, ``/root``, ``/work``, host ``/tmp``,
  ``/etc/shadow`` or worker secrets (the environment is cleared too).
* ``/tmp`` and ``/dev/shm`` are size-bounded tmpfs, everything else read-only (bwrap's
  own root and ``/dev`` are tmpfs that could eat half the host's RAM); the workspace copy
  is the only host directory bound writable, its size watched while the command runs
  (:func:`bot.agent.tools.sandbox_run.run`).
* The run's visible skills (docs/skills.md), each skill's folder read-only at
  ``/skills/<name>``: the only other host directories the command sees, so a skill's
  instructions can run its scripts; the folders are never changed by a command.
* Limits are set by ``prlimit`` *inside* the namespaces: RLIMIT_NPROC counts a user's
  processes per user namespace, so set there it bounds this command alone and not every
  process of the worker's uid. A worker running as root is exempt from RLIMIT_NPROC, so
  a root worker starts bwrap as an unprivileged uid (``sandbox.uid``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bot.agent.skills import SKILLS_ROOT
from bot.config import SandboxSettings

MIB = 1024 * 1024
SHM_MB = 64  # /dev/shm, for POSIX shared memory and semaphores (Python multiprocessing)
SANDBOX_UID = 1000  # the command's uid inside; outside it is the worker's (or sandbox.uid)
WORKDIR = "/workspace"
_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
INIT = ["/bin/sh", "-c", '/bin/sh -c "$1"; exit $?', "sh"]
"""The sandbox's pid 1 (``--as-pid-1``): a shell running the command as its child. bwrap's
own init is not used: bwrap exits without reaping it, which leaves a zombie on hosts whose
pid 1 does not reap orphans. Nor is the command pid 1 itself: a namespace's pid 1 ignores
signals it has no handler for (SIGXCPU at the CPU limit, a ``kill`` from inside)."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Host paths of one sandbox: the workspace copy, the made-up ``/etc`` files, and the
    folders of the skills the run sees (by skill name)."""

    workspace: Path
    etc: Path
    skills: Mapping[str, Path] = field(default_factory=dict)


def limits_argv(s: SandboxSettings, prlimit: str, *, nproc: bool) -> list[str]:
    """``prlimit`` with every per-process limit; the CPU soft limit sends SIGXCPU a second
    before the hard one kills, so the result can say which limit it was."""
    argv = [
        prlimit,
        f"--cpu={s.cpu_seconds}:{s.cpu_seconds + 1}",
        f"--as={s.memory_mb * MIB}",
        f"--fsize={s.disk_mb * MIB}",
        "--nofile=1024",
        "--core=0",
    ]
    return [*argv, f"--nproc={s.max_processes}", "--"] if nproc else [*argv, "--"]


def bwrap_argv(s: SandboxSettings, *, bwrap: str, prlimit: str, layout: Layout) -> list[str]:
    """The bwrap command line up to the command line itself (append it: one argument)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    argv += ["--as-pid-1", "--die-with-parent", "--new-session", "--clearenv"]
    for name, value in _ENV.items():
        argv += ["--setenv", name, value]
    argv += ["--ro-bind", "/usr", "/usr", *_system_dirs()]
    for name in _ETC:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for name in ("passwd", "group"):
        argv += ["--ro-bind", str(layout.etc / name), f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(s.disk_mb * MIB), "--tmpfs", "/tmp"]
    argv += ["--size", str(min(s.disk_mb, SHM_MB) * MIB), "--tmpfs", "/dev/shm"]
    argv += ["--bind", str(layout.workspace), WORKDIR, "--chdir", WORKDIR]
    for name, root in sorted(layout.skills.items()):
        argv += ["--ro-bind", str(root), f"{SKILLS_ROOT}/{name}"]
    # bwrap's root and /dev are unbounded tmpfs (half the host's RAM): no writes there.
    # Device nodes are bind mounts of their own and stay writable.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--"]
    return argv + limits_argv(s, prlimit, nproc=True) + INIT


def _system_dirs() -> list[str]:
    """Merged-/usr hosts have ``/bin -> usr/bin`` links; older ones have real dirs."""
    out: list[str] = []
    for name in _SYSTEM_DIRS:
        host = Path("/", name)
        if host.is_symlink():
            out += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            out += ["--ro-bind", str(host), str(host)]
    return out


def write_etc(etc: Path) -> None:
    """A ``passwd`` and ``group`` naming only the sandbox user (tools like ``id`` and
    Python's ``getpass`` want one; the host's would list its accounts)."""
    etc.mkdir(mode=0o755)
    uid = SANDBOX_UID
    (etc / "passwd").write_text(f"sandbox:x:{uid}:{uid}::/tmp:/bin/sh\n")
    (etc / "group").write_text(f"sandbox:x:{uid}:\n")
    for name in ("passwd", "group"):
        (etc / name).chmod(0o644)
