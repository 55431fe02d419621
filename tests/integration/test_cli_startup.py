"""Start-up mistakes are one line on stderr and exit code 2, never a traceback.

Every case runs the real command line (``python -m bot ...``) in a subprocess with a clean
environment, as an operator would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from bot.testing.fake_slack import FakeSlack
from bot.testing.netutil import free_port

SLACK_HALF = {"FANBOT_SLACK__BOT_TOKEN": "xoxb-1-2-3"}
COMMANDS = ["gateway", "worker", "console", "doctor", "subagents list"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The working directory (no ./fanbot.toml in it) and state directory of the command."""
    return tmp_path


def run(
    home: Path, command: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *command.split()],
        env=clean_env(home, env or {}),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def clean_env(home: Path, env: Mapping[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FANBOT_", "OPENAI_"))}
    return {**base, "FANBOT_STATE_DIR": str(home / "state"), **env}


def one_line(proc: subprocess.CompletedProcess[str], command: str, *needles: str) -> str:
    """The single stderr line of a start-up error (exit 2), naming each of ``needles``."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"fanbot {command.split()[0]}: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_slack_bot_token_without_app_token(home: Path, command: str) -> None:
    line = one_line(run(home, command, SLACK_HALF), command, "FANBOT_SLACK__APP_TOKEN")
    assert "xoxb-1-2-3" not in line


def test_slack_http_mode_needs_the_signing_secret(home: Path) -> None:
    env = {**SLACK_HALF, "FANBOT_SLACK__MODE": "http"}
    one_line(run(home, "gateway", env), "gateway", "FANBOT_SLACK__SIGNING_SECRET")


# gateway and worker wait for Redis instead: tests/integration/test_redis_waits.py
@pytest.mark.parametrize("command", ["subagents list", "console --external-redis"])
def test_redis_unreachable_names_the_url_without_its_password(home: Path, command: str) -> None:
    port = free_port()
    env = {
        "FANBOT_REDIS_URL": f"redis://:hunter22@127.0.0.1:{port}/0",
        "FANBOT_TELEGRAM__BOT_TOKEN": "42:abc",  # the gateway needs a platform
        "FANBOT_TELEGRAM__API_URL": f"http://127.0.0.1:{free_port()}/bot",
    }
    line = one_line(
        run(home, command, env),
        command,
        f"cannot reach Redis at redis://***@127.0.0.1:{port}/0 (FANBOT_REDIS_URL)",
    )
    assert "hunter22" not in line


@pytest.mark.parametrize("command", ["gateway", "worker", "doctor"])
def test_redis_url_without_a_scheme(home: Path, command: str) -> None:
    env = {"FANBOT_REDIS_URL": "localhost:6379"}
    one_line(run(home, command, env), command, "FANBOT_REDIS_URL", "write redis://localhost:6379/0")


@pytest.mark.parametrize("command", ["gateway", "worker", "doctor"])
def test_an_explicit_config_file_that_does_not_exist(home: Path, command: str) -> None:
    env = {"FANBOT_CONFIG": str(home / "typo.toml")}
    one_line(run(home, command, env), command, f"FANBOT_CONFIG names {home / 'typo.toml'}")


@pytest.mark.parametrize("command", ["worker", "doctor", "subagents list"])
def test_misspelled_keys_in_the_file(home: Path, command: str) -> None:
    (home / "fanbot.toml").write_text("[subagents]\nmax_concurent = 3\n[gatway]\nx = 1\n")
    one_line(
        run(home, command),
        command,
        "subagents.max_concurent (did you mean subagents.max_concurrent?)",
        "gatway (did you mean gateway?)",
    )


def test_gateway_without_any_platform(home: Path) -> None:
    one_line(run(home, "gateway"), "gateway", "no platform configured", "fanbot console")


def test_version_and_worker_help(home: Path) -> None:
    version = run(home, "--version")
    assert version.returncode == 0 and version.stdout.startswith("fanbot 0."), version
    helped = run(home, "worker --help")
    assert helped.returncode == 0 and "--count" in helped.stdout, helped
    assert "Usage: fanbot worker [OPTIONS]" in helped.stdout


def test_unreachable_telegram_is_one_log_line_per_attempt_and_the_gateway_keeps_running(
    home: Path, redis_url: str
) -> None:
    api = f"http://127.0.0.1:{free_port()}/bot"
    env = clean_env(
        home,
        {
            "FANBOT_REDIS_URL": redis_url,
            "FANBOT_TELEGRAM__BOT_TOKEN": "42:secret-token",
            "FANBOT_TELEGRAM__API_URL": api,
        },
    )
    log = home / "gateway.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "gateway"], env=env, cwd=home, stderr=out
        )
    try:
        first = f"telegram: cannot reach {api} (connection refused); retrying in 1s"
        second = f"telegram: cannot reach {api} (connection refused); retrying in 2s"
        deadline = time.monotonic() + 30
        while second not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        assert first in text and second in text, text
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text and "secret-token" not in text
    # One line per attempt, nothing else but the start-up line of the HTTP endpoints and
    # the stop's.
    lines = [
        line for line in text.splitlines() if "HTTP endpoints on" not in line
        and "stopping: stopped in" not in line
    ]  # fmt: skip
    assert all("WARNING" in line for line in lines), text


async def test_a_gateway_whose_only_platform_refuses_its_token(home: Path, redis_url: str) -> None:
    async with FakeSlack() as slack:
        env = {
            "FANBOT_REDIS_URL": redis_url,
            "FANBOT_SLACK__BOT_TOKEN": "xoxb-wrong-token",
            "FANBOT_SLACK__APP_TOKEN": slack.app_token,
            "FANBOT_SLACK__API_URL": slack.api_url,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "gateway",
            env=clean_env(home, env), cwd=home, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    done = subprocess.CompletedProcess(
        ["gateway"], proc.returncode or 0, out.decode(), err.decode()
    )
    line = one_line(done, "gateway", "slack: Slack rejected FANBOT_SLACK__BOT_TOKEN (auth.test)")
    assert "xoxb-wrong-token" not in line


@pytest.mark.parametrize("command", ["worker", "console"])
@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("myhooks:nope", "'myhooks' has no attribute 'nope'"),
        ("myhooks.NOT_A_HOOK", "is a int, not a callable"),
        ("nosuch_hooks_x:f", "cannot import 'nosuch_hooks_x'"),
    ],
)
def test_a_hook_that_cannot_be_found_stops_start_up(
    home: Path, command: str, path: str, why: str
) -> None:
    (home / "myhooks.py").write_text("NOT_A_HOOK = 1\n\n\ndef ok(event):\n    pass\n")
    types = f'[{{"name": "a", "middleware": ["myhooks:ok", "{path}"]}}]'
    env = {"FANBOT_SUBAGENT_TYPES": types}
    one_line(
        run(home, command, env), command, f"FANBOT_SUBAGENT_TYPES[0].middleware[1] '{path}'", why
    )
