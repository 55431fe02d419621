"""`fanbot console` as a user runs it: piped input, the offline model, clean exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from bot.testing import wait_until
from bot.testing.stack import hermetic_env


def console(state: Path, **kw: object) -> subprocess.Popen[str]:
    env = hermetic_env({"state_dir": str(state)})
    return subprocess.Popen(
        [sys.executable, "-c", "from bot.cli import main; main()", "console", "--workers", "3"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def redis_alive(tmp_path: Path) -> list[int]:
    """PIDs of redis-servers whose command line names ``tmp_path`` (the console's own)."""
    return [
        p.pid for p in psutil.process_iter(["cmdline"])
        if "redis-server" in " ".join(p.info["cmdline"] or []) and str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ]  # fmt: skip


def descendants_alive(pid: int) -> list[int]:
    return [p.pid for p in psutil.process_iter() if _started_by(p, pid)]


def _started_by(proc: psutil.Process, pid: int) -> bool:
    try:
        return str(pid) in " ".join(proc.cmdline()) and "--parent-pid" in proc.cmdline()
    except psutil.Error:
        return False


def test_piped_console_fans_out_announces_and_exits(tmp_path: Path) -> None:
    proc = console(tmp_path / "state")
    out, _ = proc.communicate("hi\ncompare redis streams and kafka for an outbox\n", timeout=90)
    assert proc.returncode == 0, out
    assert "OFFLINE SCRIPTED DEMO MODEL" in out
    assert "fanbot › Hi! I'm fanbot" in out
    assert "fanbot › Started 3 subagents" in out
    for label in ("Research", "Outline", "Review"):
        assert f'"{label}" (general-purpose) finished' in out
    assert out.count("Status: success") == 3
    assert "⏳ [general-purpose] Subagent #" in out  # progress lines: type tag first
    assert len(re.findall(r"— success \(\d+ tools?, [\dms.]+\)$", out, re.M)) == 3, out
    assert (tmp_path / "state" / "redis" / "appendonlydir").exists() or any(
        (tmp_path / "state" / "redis").glob("*.aof")
    )
    wait_until(lambda: descendants_alive(proc.pid) == [], timeout=5)


def test_ctrl_c_shuts_everything_down(tmp_path: Path) -> None:
    with console(tmp_path / "state") as proc:
        assert proc.stdout is not None
        while "type a message" not in proc.stdout.readline():
            assert proc.poll() is None
        os.kill(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert "Stopping the workers… (Ctrl-C again to force)" in rest
        assert "Stopped in " in rest
    wait_until(lambda: descendants_alive(proc.pid) == [], timeout=5)
    wait_until(lambda: redis_alive(tmp_path) == [], timeout=5)
