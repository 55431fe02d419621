"""``fanbot subagents list|info|stop`` against real Redis."""

from __future__ import annotations

import os

import redis
from typer.testing import CliRunner

from bot.cli import app
from bot.config import Settings
from bot.deps import Deps
from bot.types import RunStatus, ThreadRef
from tests.integration.test_control_redis import spawn_run

runner = CliRunner()


def env(url: str) -> dict[str, str]:
    return {"FANBOT_REDIS_URL": url, "FANBOT_CONFIG": os.devnull}


def test_ops_list_info_stop(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, openai={"models": ["m"], "model": "m"})  # type: ignore[arg-type]
    deps = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    try:
        other = ThreadRef(platform="telegram", account="B", chat="-100", thread="7")
        first = spawn_run(deps, task="first task")
        second = spawn_run(deps, thread=other, task="second task")

        listed = runner.invoke(app, ["subagents", "list"], env=env(redis_url))
        assert listed.exit_code == 0, listed.output
        lines = listed.output.splitlines()
        assert [line[:12] for line in lines] == [second.run_id[:12], first.run_id[:12]]
        assert "agent:main:telegram:-100:topic:7" in lines[0] and "second task" in lines[0]

        info = runner.invoke(app, ["subagents", "info", first.run_id[:6]], env=env(redis_url))
        assert info.exit_code == 0, info.output
        assert f"• Run id: {first.run_id}" in info.output
        assert "• Session: agent:main:slack:C1:thread:1.0" in info.output

        stopped = runner.invoke(app, ["subagents", "stop", first.run_id[:6]], env=env(redis_url))
        assert stopped.exit_code == 0, stopped.output
        assert stopped.output.strip() == f"run {first.run_id[:12]} stopped"
        record = deps.runs.get(first.run_id)
        assert record is not None and record.status is RunStatus.STOPPED
        assert record.notes == "stopped by an operator (fanbot subagents stop) before it started"

        again = runner.invoke(app, ["subagents", "stop", first.run_id], env=env(redis_url))
        assert again.output.strip() == f"run {first.run_id[:12]} already ended (stopped)"
        only_active = runner.invoke(app, ["subagents", "list"], env=env(redis_url))
        assert len(only_active.output.splitlines()) == 1
        session = runner.invoke(
            app,
            ["subagents", "list", "--all", "--session", "agent:main:slack:C1:thread:1.0"],
            env=env(redis_url),
        )
        assert "stopped" in session.output and first.run_id[:12] in session.output
    finally:
        deps.close()


def test_ops_errors_have_exit_codes(redis_url: str) -> None:
    missing = runner.invoke(app, ["subagents", "info", "ffffffff"], env=env(redis_url))
    assert missing.exit_code == 1 and "no run id starts with 'ffffffff'" in missing.output
    short = runner.invoke(app, ["subagents", "stop", "ab"], env=env(redis_url))
    assert short.exit_code == 1 and "too short" in short.output
    empty = runner.invoke(app, ["subagents", "list", "--all"], env=env(redis_url))
    assert empty.exit_code == 0 and empty.output.strip() == "no runs"
    down = runner.invoke(app, ["subagents", "list"], env=env("redis://127.0.0.1:1/0"))
    assert down.exit_code == 2 and "cannot reach Redis" in down.output
    bad = runner.invoke(
        app, ["subagents", "list"], env={**env(redis_url), "FANBOT_ADMINS": "not json"}
    )
    assert bad.exit_code == 2 and "invalid configuration" in bad.output
