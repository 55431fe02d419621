"""Running one command and bounding what it costs the worker: wall time, output, disk.

Both pipes are read as the command writes (a full pipe would stall it); each keeps its
first ``max_output`` bytes and counts the rest. A watch callback (the workspace copy's
size) runs every :data:`WATCH_SECONDS`. Any limit kills the whole process group.

Under bwrap, the sandbox's init can outlive bwrap by a moment while the kernel empties
its pid namespace, so :func:`run` learns the init's pid (``--info-fd``) and returns only
once it has exited: after a call, nothing of the sandbox runs and its copy is still.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.supervise import abort

WATCH_SECONDS = 0.2
PIPE_BYTES = 1 << 20  # fewer wake-ups while draining a flood of output
OUTPUT_KILL_BYTES = 64 << 20
"""Output past the kept part is read and dropped, so a chatty build still finishes; past
this much in all it is a runaway, killed before it costs the worker more CPU."""
INIT_GRACE_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a command ended and what it printed (each stream cut at the output limit)."""

    exit_code: int | None
    killed: str
    stdout: bytes
    stderr: bytes
    stdout_cut: int
    stderr_cut: int
    seconds: float


class _Capped:
    """Keeps the first ``limit`` bytes of a stream and counts the rest (read and dropped,
    so the command is never blocked on a full pipe and the worker never holds more)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.kept)
        self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - room)


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the process that started it dies. A work
    horse ends with ``os._exit`` or is SIGKILLed; without this a bwrap it started (even the
    availability probe) is left running, owned by init."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def run(
    argv: list[str],
    *,
    timeout: float,
    max_output: int,
    watch: Callable[[], str],
    user: int | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    bwrap: bool = False,
) -> Outcome:
    """Run ``argv`` in its own process group; kill the group at ``timeout``, on an output
    flood, or when ``watch()`` returns a reason.

    Args:
        user: Host uid (and gid) to run as; None keeps ours.
        bwrap: ``argv[0]`` is bwrap: also wait for its sandbox's init to be gone.
    """
    start = time.monotonic()
    info_r, info_w = os.pipe() if bwrap else (-1, -1)
    if bwrap:
        argv = [argv[0], "--info-fd", str(info_w), *argv[1:]]
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env if env is not None else {}, cwd=cwd, start_new_session=True,
            pass_fds=(info_w,) if bwrap else (), pipesize=PIPE_BYTES,
            user=user, group=user, extra_groups=None if user is None else [],
            preexec_fn=_die_with_parent,
        )  # fmt: skip
    finally:
        if bwrap:
            os.close(info_w)
    init = _init_pidfd(info_r, deadline=start + INIT_GRACE_SECONDS) if bwrap else None
    try:
        with abort.closing(lambda: _kill(proc, init)):  # a stopped run's command dies at once
            return _watch(proc, start=start, timeout=timeout, max_output=max_output,
                          watch=watch, kill=lambda: _kill(proc, init))  # fmt: skip
    finally:
        if init is not None:
            _await_exit(init)


def _watch(
    proc: subprocess.Popen[bytes],
    *,
    start: float,
    timeout: float,
    max_output: int,
    watch: Callable[[], str],
    kill: Callable[[], None],
) -> Outcome:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capped(max_output), _Capped(max_output)
    killed, leftovers = "interrupted", True
    try:
        killed, leftovers = _pump(proc, {proc.stdout.fileno(): out, proc.stderr.fileno(): err},
                                  deadline=start + timeout, watch=watch, timeout=timeout)  # fmt: skip
    finally:
        if killed or leftovers or proc.poll() is None:
            kill()
        proc.stdout.close()
        proc.stderr.close()
    code = proc.wait()
    return Outcome(exit_code=None if killed else code, killed=killed,
                   stdout=bytes(out.kept), stderr=bytes(err.kept), stdout_cut=out.dropped,
                   stderr_cut=err.dropped, seconds=time.monotonic() - start)  # fmt: skip


def _pump(
    proc: subprocess.Popen[bytes],
    streams: dict[int, _Capped],
    *,
    deadline: float,
    watch: Callable[[], str],
    timeout: float,
) -> tuple[str, bool]:
    """Read both pipes until they close. Returns why the command must be killed (or ""),
    and whether processes it left behind still hold a pipe."""
    with selectors.DefaultSelector() as sel:
        for fd in streams:
            sel.register(fd, selectors.EVENT_READ)
        next_watch = time.monotonic() + WATCH_SECONDS
        exited_at: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return f"wall time limit ({timeout:g} s)", False
            if now >= next_watch:
                if reason := watch():
                    return reason, False
                next_watch = now + WATCH_SECONDS
            if proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > 1.0:
                    return "", True
            for key, _ in sel.select(timeout=min(WATCH_SECONDS, max(0.0, deadline - now))):
                chunk = os.read(key.fd, PIPE_BYTES)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    sel.unregister(key.fd)
            if reason := _flood(streams):
                return reason, False
    return "", False


def _flood(streams: dict[int, _Capped]) -> str:
    if sum(s.dropped for s in streams.values()) <= OUTPUT_KILL_BYTES:
        return ""
    return f"output passed {OUTPUT_KILL_BYTES >> 20} MB (a runaway: only the first part is kept)"


def _kill(proc: subprocess.Popen[bytes], init: int | None) -> None:
    """Kill the sandbox's pid 1 first, which empties its pid namespace, so bwrap lives to
    reap it (killing bwrap first would orphan it); then the process group, for what is
    left and for unsafe-host mode. Once the leader is reaped its pid may be reused, so the
    group is killed only while the leader lives or a leftover member still holds its id."""
    if init is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(init, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    if proc.returncode is None or init is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _init_pidfd(info_r: int, *, deadline: float) -> int | None:
    """A pidfd of the sandbox's init, from bwrap's ``--info-fd`` JSON (None if bwrap
    failed before starting one)."""
    data = b""
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([info_r], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(info_r, 4096) if ready else b""
            if not chunk:
                break
            data += chunk
    finally:
        os.close(info_r)
    try:
        info = json.loads(data)
        pid, namespace = int(info["child-pid"]), f"pid:[{int(info['pid-namespace'])}]"
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    try:  # the pid is ours only if it is still the sandbox's (it could have been reused)
        if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
            return pidfd
    except OSError:
        pass
    os.close(pidfd)
    return None


def _await_exit(pidfd: int) -> None:
    """Wait for the init to exit (it exits after every process of its namespace)."""
    try:
        if not select.select([pidfd], [], [], INIT_GRACE_SECONDS)[0]:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            select.select([pidfd], [], [], INIT_GRACE_SECONDS)
    except OSError:
        pass
    finally:
        os.close(pidfd)
