"""`fanbot console` as a user runs it: piped input, the offline model, clean exit."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
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


# -- the demo tells the truth (issue 30) ------------------------------------------------------


def read_until(proc: subprocess.Popen[str], seen: list[str], text: str, times: int = 1) -> str:
    """Read output lines into ``seen`` until ``text`` was printed ``times`` times."""
    assert proc.stdout is not None
    while sum(text in line for line in seen) < times:
        line = proc.stdout.readline()
        assert line, f"{text!r} never printed:\n{''.join(seen)[-3000:]}"
        seen.append(line)
    return "".join(seen)


def test_refused_spawns_are_shown_as_refused_with_the_reason(tmp_path: Path) -> None:
    proc = console(tmp_path / "state")
    paste = "compare these notes: " + "lorem ipsum dolor sit amet " * 2217
    assert len(paste) == 59_880
    out, _ = proc.communicate(paste + "\n", timeout=90)
    assert proc.returncode == 0, out
    assert "Your message was 59,880 characters long; I read only the first 32,000." in out
    assert "fanbot › No subagent started: all refused:" in out
    for label in ("Research", "Outline", "Review"):
        assert re.search(
            rf"- {label}: invalid arguments for sessions_spawn: .*task is 32,0\d\d characters "
            r"long; at most 20,000 are allowed",
            out,
        ), out
    assert "Started" not in out and "Subagent #" not in out


def test_the_hint_works_from_another_shell_and_the_demo_model_is_named(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = hermetic_env({"state_dir": str(state)}) | {"FANBOT_DEMO_SUBAGENT_DELAY": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "console", "--workers", "3"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    seen: list[str] = []
    try:
        out = read_until(proc, seen, "Health and metrics: http://127.0.0.1:")
        port = int(re.findall(r"http://127\.0\.0\.1:(\d+)/healthz", out)[0])
        assert port != 8080  # a gateway started beside it keeps its port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
        proc.stdin.write("compare redis streams and kafka\n")
        proc.stdin.flush()
        out = read_until(proc, seen, "The research, outline and review agree")
        hint = re.findall(r"run `([^`]+)` in another shell", out)
        assert len(set(hint)) == 1, out
        assert hint[0].startswith(f"FANBOT_REDIS_URL=unix://{state}/redis/redis.sock fanbot ")
        # Another shell: this process's environment without the console's, as a person has.
        other = hermetic_env({})
        command = hint[0].replace(" fanbot ", f" {sys.executable} -m bot ", 1)
        listed = subprocess.run(
            ["sh", "-c", command], env=other, capture_output=True, text=True, timeout=30
        )
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("success") == 3, listed.stdout
        bare = subprocess.run(  # without the hint's URL: the machine's Redis, not the console's
            [sys.executable, "-m", "bot", "subagents", "list", "--all"],
            env=other | {"FANBOT_REDIS_URL": "redis://127.0.0.1:1/0"},
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert bare.returncode == 2

        proc.stdin.write("/subagents info 1\n:threads\n")
        proc.stdin.flush()
        # `:threads` is answered by the console at once, /subagents info through the
        # gateway: either may print first.
        read_until(proc, seen, "`main` —")
        out = read_until(proc, seen, "Model: `")
        assert "Model: `offline-demo`" in out
        assert "gpt-4o" not in out
        assert re.search(r"\* `main` — \d+ messages, 3 runs", out), out[-2000:]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):  # also when an assertion failed
            if pipe is not None:
                pipe.close()


def test_threads_and_run_numbers_carry_over_until_reset(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = console(state)
    out, _ = first.communicate("compare redis streams and kafka\n", timeout=90)
    assert first.returncode == 0, out

    again = console(state)
    out, _ = again.communicate(":threads\n/subagents info 3\n", timeout=60)
    assert again.returncode == 0, out
    assert re.search(r"\* `main` — \d+ messages, 3 runs", out), out  # the next run is #4
    assert "**Subagent #3** · ✅ success" in out and "Model: `offline-demo`" in out

    reset = subprocess.run(
        [sys.executable, "-m", "bot", "console", "--workers", "2", "--reset"],
        env=hermetic_env({"state_dir": str(state)}),
        input=":threads\n/subagents info 3\n", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert f"Reset: emptied the console's Redis in {state / 'redis'}." in reset.stdout
    assert "* `main` — 0 messages, no runs" in reset.stdout
    assert "**Subagent #3**" not in reset.stdout

    external = subprocess.run(
        [sys.executable, "-m", "bot", "console", "--reset", "--external-redis"],
        env=hermetic_env({"state_dir": str(state), "redis_url": "redis://127.0.0.1:1/0"}),
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert external.returncode == 2
    assert "--reset empties the console's private Redis" in external.stderr


def test_piped_mode_exits_1_when_a_turn_failed(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: the model endpoint refuses
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        env = hermetic_env(
            {"state_dir": str(tmp_path / "state"), "openai": {"base_url": url, "max_retries": 0}}
        )
        proc = subprocess.run(
            [sys.executable, "-m", "bot", "console", "--workers", "2"],
            env=env, input="hello there\n", capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert "The model call failed" in proc.stdout, proc.stdout + proc.stderr
    assert "1 turn failed: exit 1." in proc.stdout
    assert proc.returncode == 1


def test_a_stopped_run_keeps_its_partial_result(tmp_path: Path) -> None:
    env = hermetic_env({"state_dir": str(tmp_path / "state")})
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "console", "--workers", "3"],
        env=env | {"FANBOT_DEMO_SUBAGENT_DELAY": "60"},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []
    try:
        read_until(proc, seen, "type a message")
        proc.stdin.write("compare redis streams and kafka\n")
        proc.stdin.flush()
        # Each run's first step said its draft, then called current_time: its card says so.
        read_until(proc, seen, "current_time", times=3)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(seen) + rest
    assert proc.returncode == 130, out
    assert out.count("Status: stopped") == 3, out
    assert out.count("Result:\n**Draft** for: ") == 3, out
    assert out.count("; the result is partial") == 3, out
    assert "(none: it ended before it wrote any text)" not in out
