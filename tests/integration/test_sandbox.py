"""``execute`` in a real bubblewrap sandbox: the workspace round trip, escape attempts
(each contained and reported as text), and the sandbox that cannot run.

Limits are set small so the whole module runs in well under half a minute.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.tools import execute_tool
from bot.agent.tools.sandbox import (
    SCRATCH_PREFIX,
    STALE_SECONDS,
    _sweep_stale,
    sandbox_status,
    sandbox_tools,
)
from bot.agent.tools.toolbox import all_tools
from bot.cli.doctor import check_sandbox
from bot.config import Settings
from bot.deps import Deps
from bot.testing import wait_until
from bot.types import ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = "agent:main:slack:C1:thread:1.0"
REPO = Path(__file__).resolve().parents[2]
LIMITS = {"timeout_seconds": 4, "cpu_seconds": 1, "memory_mb": 256, "max_processes": 32,
          "max_output_bytes": 10_000, "disk_mb": 64}  # fmt: skip


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(redis_url=redis_url, sandbox=LIMITS,  # type: ignore[arg-type]
                        workspace={"max_file_bytes": 100_000, "max_files": 50})  # type: ignore[arg-type]  # fmt: skip
    d = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def ctx_for(deps: Deps, **kw: Any) -> ToolContext:
    return ToolContext(deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1",
                       agent_id="main", **kw)  # fmt: skip


def execute(deps: Deps, command: str, **kw: Any) -> str:
    tools = {t.name: t for t in sandbox_tools(deps.settings)}
    assert "execute" in tools, sandbox_status(deps.settings.sandbox)
    return execute_tool(tools, name="execute", arguments=json.dumps({"command": command}),
                        ctx=ctx_for(deps, **kw), max_chars=100_000)  # fmt: skip


def test_the_sandbox_works_on_a_copy_of_the_workspace(deps: Deps) -> None:
    ws = deps.workspace
    ws.put_text(SESSION, "plan.md", "step 1\n")
    ws.put_text(SESSION, "old.txt", "bye")
    out = execute(deps, "pwd; cat plan.md; echo 'step 2' >> plan.md; mkdir -p out && "
                  "printf '\\000\\377' > out/blob.bin; rm old.txt; echo done")  # fmt: skip
    assert out.startswith("exit code 0 · ")
    assert out.endswith(
        "files changed: /old.txt (deleted); /out/blob.bin (new, 2 B); /plan.md (modified, 14 B)"
        "\nstdout:\n/workspace\nstep 1\ndone\nstderr: (empty)"
    )
    assert ws.get_text(SESSION, "plan.md") == "step 1\nstep 2\n"
    assert ws.get_bytes(SESSION, "out/blob.bin") == b"\x00\xff"
    assert ws.paths(SESSION) == ["/out/blob.bin", "/plan.md"]


def test_a_subagent_runs_over_the_files_its_requester_wrote(deps: Deps) -> None:
    deps.workspace.put_text(SESSION, "data.csv", "a,b\n1,2\n")
    child = ToolContext(deps=deps, session_key="agent:main:subagent:x", thread=THREAD,
                        requester="slack:U1", agent_id="main", workspace_key=SESSION)  # fmt: skip
    tools = {t.name: t for t in sandbox_tools(deps.settings)}
    out = execute_tool(tools, name="execute", ctx=child, max_chars=10_000,
                       arguments=json.dumps({"command": "wc -l < data.csv > n.txt"}))  # fmt: skip
    assert "files changed: /n.txt (new, 2 B)" in out
    assert deps.workspace.get_text(SESSION, "n.txt") == "2\n"


def test_no_network_not_even_the_hosts_loopback(deps: Deps) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    probe = (f"import socket\nfor a in [('127.0.0.1', {port}), ('1.1.1.1', 80)]:\n"
             "    try: socket.create_connection(a, timeout=2); print('CONNECTED', a)\n"
             "    except OSError as e: print('refused', a, e.errno)")  # fmt: skip
    out = execute(deps, f'python3 -c "{probe}"; curl -sS -m 2 http://1.1.1.1/ 2>&1; '
                  "cat /proc/net/dev | grep -c ':'")  # fmt: skip
    with pytest.raises(TimeoutError):
        listener.accept()  # nothing reached the host's listener
    listener.close()
    assert "CONNECTED" not in out
    assert f"refused ('127.0.0.1', {port}) 111" in out  # the sandbox's own, empty loopback
    assert "refused ('1.1.1.1', 80) 101" in out  # ENETUNREACH: no route out at all
    assert "curl: (7)" in out
    assert "\n1\n" in out  # one interface: lo


def test_host_files_are_not_there(deps: Deps, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_TEST_SECRET", "s3cret-value")
    out = execute(deps, f"cat /etc/shadow; ls /root /home /work; cat {REPO}/README.md; "
                  "cat /proc/1/environ; echo; tr '\\0' ' ' < /proc/1/cmdline; echo; "
                  "ls /proc | grep -c '^[0-9]'; env | sort")  # fmt: skip
    for gone in ("/etc/shadow", "'/root'", "'/home'", "'/work'", f"{REPO}/README.md"):
        assert f"{gone}: No such file or directory" in out or f"access {gone}" in out, gone
    assert "s3cret" not in out and "FANBOT" not in out and "REDIS" not in out
    assert '/bin/sh -c /bin/sh -c "$1"; exit $? sh' in out  # the sandbox's pid 1, not the host's
    assert "HOME=/tmp\nLANG=C.UTF-8\nPATH=/usr/local/bin:/usr/bin:/bin\nPWD=/workspace" in out


def test_writes_outside_the_workspace_fail_or_vanish(deps: Deps) -> None:
    marker = f"fanbot-sandbox-test-{os.getpid()}"
    out = execute(deps, f"echo x > /usr/{marker}; echo x > /etc/{marker}; echo x > /{marker}; "
                  f"echo x > /dev/{marker}; echo x > /tmp/{marker} && echo tmp-ok; "
                  "echo x > /proc/sys/kernel/hostname; echo x > /dev/null && echo null-ok; "
                  "head -c 100M /dev/zero > /dev/shm/big")  # fmt: skip
    assert out.count("Read-only file system") == 4
    assert "cannot create /proc/sys/kernel/hostname: Permission denied" in out
    assert "tmp-ok" in out and "null-ok" in out  # its private tmpfs; devices work
    # /dev/shm holds 64 MB; here a file also may not pass disk_mb (64 MB): either stops it.
    assert "No space left on device" in out or "killed by SIGXFSZ (file size limit)" in out
    assert not any(Path(d, marker).exists() for d in ("/usr", "/etc", "/", "/tmp"))
    assert "\nfiles changed: none\n" in out


def test_symlinks_and_special_files_are_not_followed_back(deps: Deps) -> None:
    out = execute(deps, "ln -s /etc/passwd leak; ln -s / root; mkfifo pipe; echo ok > real")
    assert "files changed: /real (new, 3 B)" in out
    assert "not kept: /leak: a symlink; /pipe: not a regular file; /root: a symlink" in out
    assert deps.workspace.paths(SESSION) == ["/real"]


def test_a_change_behind_an_old_mtime_still_comes_back(deps: Deps) -> None:
    deps.workspace.put_text(SESSION, "f.txt", "ab")
    deps.workspace.put_text(SESSION, "same.txt", "kept")
    out = execute(deps, "printf xy > f.txt && touch -d @0 f.txt; touch same.txt")
    assert "files changed: /f.txt (modified, 2 B)\n" in out  # same.txt: touched, not changed
    assert deps.workspace.get_text(SESSION, "f.txt") == "xy"


def test_a_fork_bomb_is_contained(deps: Deps) -> None:
    start, started_at = time.monotonic(), time.time() - 1
    # The outer shell outlives the bomb for 2 s, so the bomb does hit the process limit.
    out = execute(deps, "bash -c ':(){ :|:& };:'; sleep 2; echo outer-shell-done")
    assert time.monotonic() - start < 10
    assert "fork: retry: Resource temporarily unavailable" in out or "Cannot fork" in out
    if os.geteuid() == 0:  # the sandbox ran as sandbox.uid: none of its processes is left
        uid = deps.settings.sandbox.uid
        left = [
            p.pid
            for p in psutil.process_iter(["uids", "create_time"])
            if p.info["uids"]
            and p.info["uids"].real == uid
            and p.info["create_time"] >= started_at  # ours: not another test's or process's
        ]
        assert left == []


def test_a_memory_bomb_fails_inside(deps: Deps) -> None:
    out = execute(deps, "python3 -c 'x = bytearray(2 * 1024**3)'")
    assert out.startswith("exit code 1 · ")
    assert "MemoryError" in out


def test_endless_loops_meet_the_cpu_and_wall_limits(deps: Deps) -> None:
    assert "exit code 152: killed by SIGXCPU (CPU time limit)" in execute(
        deps, "while :; do :; done"
    )
    start = time.monotonic()
    assert execute(deps, "sleep 60").startswith("killed: wall time limit (4 s)")
    assert time.monotonic() - start < 6


def test_a_flood_of_output_is_cut_and_never_held(deps: Deps) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = execute(deps, "yes | head -c 1G")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert out.startswith("killed: output passed 64 MB (a runaway: only the first part is kept)")
    assert out.count("y\n") == 5_000  # 10 000 bytes kept
    assert "more bytes not kept]" in out
    assert grown_mb < 50


def test_output_up_to_the_kill_line_is_drained_not_fatal(deps: Deps) -> None:
    out = execute(deps, "yes | head -c 5M; echo end >&2")
    assert out.startswith("exit code 0")
    assert f"[… stdout cut: {5 * 2**20 - 10_000} more bytes not kept]" in out
    assert "stderr:\nend" in out


def test_disk_and_workspace_budgets_hold(deps: Deps) -> None:
    out = execute(deps, "head -c 200000 /dev/zero > big.bin; for i in $(seq 60); do "
                  "echo $i > f$i; done")  # fmt: skip
    assert "/big.bin: 200 kB is more than a file may hold (100 kB)" in out
    assert "the workspace holds its maximum of 50 files" in out
    assert len(deps.workspace.paths(SESSION)) == 50
    out = execute(deps, "for i in 1 2 3 4; do head -c 30M /dev/zero > t$i; done; sleep 10")
    assert out.startswith("killed: the workspace copy passed 64 MB")


def test_a_file_changed_meanwhile_is_not_overwritten(deps: Deps) -> None:
    deps.workspace.put_text(SESSION, "a.txt", "v1")

    def other_run() -> None:
        time.sleep(0.5)
        deps.workspace.put_text(SESSION, "a.txt", "other", replaces="")

    thread = threading.Thread(target=other_run)
    thread.start()
    out = execute(deps, "sleep 1; echo mine > a.txt")
    thread.join()
    assert "/a.txt changed meanwhile" in out
    assert deps.workspace.get_text(SESSION, "a.txt") == "other"


def test_without_bwrap_there_is_no_execute_and_doctor_says_why(redis_url: str) -> None:
    missing = Settings(redis_url=redis_url, sandbox={"bwrap_path": "/nonexistent/bwrap"})  # type: ignore[arg-type]
    assert sandbox_tools(missing) == []
    assert "execute" not in [t.name for t in all_tools(missing)]
    check = check_sandbox(missing)
    assert check.warn and "execute not offered: bwrap not found ('/nonexistent/bwrap'" in (
        check.detail
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FANBOT_", "OPENAI_"))}
    env |= {"FANBOT_REDIS_URL": redis_url, "FANBOT_SANDBOX__BWRAP_PATH": "/nonexistent/bwrap",
            "FANBOT_CONFIG": ""}  # fmt: skip
    report = subprocess.run([sys.executable, "-m", "bot", "doctor"], env=env, text=True,
                            capture_output=True, timeout=60, check=False)  # fmt: skip
    assert "warn sandbox: execute not offered: bwrap not found" in report.stdout, report


@pytest.fixture
def refusing_bwrap() -> Iterator[str]:
    """A bwrap that fails as it does in a container forbidding user namespaces (in a
    directory the sandbox's uid can reach, as the real one would be)."""
    where = Path(tempfile.mkdtemp(prefix="fanbot-fake-bwrap-"))
    where.chmod(0o755)
    fake = where / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\n"
                    "exit 1\n")  # fmt: skip
    fake.chmod(0o755)
    yield str(fake)
    shutil.rmtree(where)


def test_a_bwrap_that_cannot_sandbox_is_tried_once_and_not_offered(refusing_bwrap: str) -> None:
    settings = Settings(sandbox={"bwrap_path": refusing_bwrap})  # type: ignore[arg-type]
    assert sandbox_tools(settings) == []
    assert check_sandbox(settings).detail == (
        f"execute not offered: {refusing_bwrap} cannot make a sandbox here: "
        "bwrap: No permissions to creating new namespace"
    )


def test_copies_left_by_a_killed_worker_are_swept() -> None:
    old, fresh = (Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX)) for _ in range(2))
    (old / "workspace").mkdir()
    (old / "workspace" / "f").write_text("x")
    os.utime(old, (time.time() - STALE_SECONDS - 60,) * 2)
    _sweep_stale()
    assert not old.exists() and fresh.exists()
    fresh.rmdir()


def test_off_and_unsafe_host_are_explicit(redis_url: str) -> None:
    assert Settings().sandbox.mode == "bwrap"
    assert sandbox_tools(Settings(sandbox={"mode": "off"})) == []  # type: ignore[arg-type]
    unsafe = Settings(redis_url=redis_url, sandbox={"mode": "unsafe-host", **LIMITS})  # type: ignore[arg-type]
    assert sandbox_status(unsafe.sandbox).unsafe
    assert "UNSAFE" in check_sandbox(unsafe).detail
    deps = Deps.build(unsafe, client=redis.Redis.from_url(redis_url))
    out = execute(deps, "pwd; echo hi > f")
    assert "fanbot-sandbox-" in out  # a host directory: no isolation, as configured
    assert deps.workspace.get_text(SESSION, "f") == "hi\n"
    deps.close()


def test_a_command_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # A work horse is SIGKILLed or ends with os._exit: what it started must not live on
    # (a leaked bwrap was found owned by init after a CI run).
    marker = tmp_path / "started"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import pathlib, sys\n"
         "from bot.agent.tools.sandbox_run import run\n"
         f"pathlib.Path({str(marker)!r}).touch()\n"
         "run(['sleep', '300'], timeout=600, max_output=100, watch=str)\n"],
    )  # fmt: skip
    try:
        sleeper = wait_until(
            lambda: (
                marker.exists()
                and [p for p in psutil.Process(child.pid).children() if p.name() == "sleep"]
            ),
            timeout=10,
        )[0]
        child.kill()
        child.wait(5)
        assert psutil.wait_procs([sleeper], timeout=5)[1] == []  # gone with its parent
    finally:
        if child.poll() is None:
            child.kill()
