"""The launcher's warm-up imports what a run needs before it forks its workers: a
subagent run, start to announce against the fake model, imports no module of its own
(one imported in a work horse is loaded, and its pages copied, once per run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Text

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from bot.config import load_settings
    from workers import jobs, launcher  # what `python -m workers` imports
    from workers.context import serving
    from tests.integration.test_finalize import make_run

    settings = load_settings()
    context = jobs.warm_up(settings, trace=False)
    make_run(context.deps, "r1", task="say hi", model="fake-model")
    before = set(sys.modules)
    with serving(context):  # as the worker serves each job
        result = jobs.run_subagent("r1")
    print(json.dumps({"status": result["status"], "new": sorted(set(sys.modules) - before)}))
    """
)


async def test_a_run_imports_nothing_the_warm_up_did_not(redis_url: str) -> None:
    async with FakeOpenAI(lambda request: Text("hi")) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FANBOT_", "OPENAI_"))}
        env |= {"FANBOT_CONFIG": os.devnull, "FANBOT_REDIS_URL": redis_url}
        env["FANBOT_OPENAI"] = json.dumps({"base_url": fake.base_url, "model": "fake-model"})
        proc = await _run(env)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer == {"status": "success", "new": []}


async def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import asyncio

    cmd = [sys.executable, "-c", SCRIPT]
    return await asyncio.to_thread(
        subprocess.run, cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
