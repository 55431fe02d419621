"""The docs' ops page picture: the page of a real stack, screenshotted by headless Chromium.

:func:`capture` starts a stack (:class:`bot.testing.stack.Stack`: a private Redis, the
gateway, forked workers, the scripted fake model), sends one message that fans out five
subagents against a cap of two, and waits until the runs stand at one done, one failed,
two running and one queued. The page is read as an operator with the view token reads it
(``Authorization: Bearer``), saved, and ``chromium --headless --screenshot`` draws it.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

import aiohttp
import redis

from bot.keys import Keys
from bot.redis.server import RedisServer
from bot.store.runs import RunsRegistry
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.netutil import LOOPBACK
from bot.testing.scripted import Call, ChatRequest, Fail, ScriptedModel, Text, ToolCalls
from bot.testing.stack import Stack
from bot.types import RunStatus, Usage

COMMAND = "chromium --headless --screenshot"
SIZE = (1200, 800)
TOKEN = "docs-pictures-view-token"
TASKS = {
    "summarise the outbox design notes": "quick",
    "check the retry policy against the SLA": "fails",
    "benchmark redis streams consumer groups": "slow",
    "survey kafka connectors for postgres": "slow",
    "draft the migration plan": "slow",
}
EXPECTED = sorted(
    [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.RUNNING, RunStatus.RUNNING, RunStatus.QUEUED]
)


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise RuntimeError("no chromium on PATH (apt-get install chromium)")


def _model() -> ScriptedModel:
    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started 5 subagents; I'll combine their results.")
        return ToolCalls([Call("sessions_spawn", {"task": t, "label": t}) for t in TASKS])

    def subagent(req: ChatRequest) -> Text | Fail:
        kind = next((k for t, k in TASKS.items() if t in req.last_user_message), "quick")
        if kind == "fails":
            return Fail(status=500)
        usage = Usage(prompt_tokens=2400, completion_tokens=650)
        return Text(f"done: {req.last_user_message[:60]}", delay=300 if kind == "slow" else 0,
                    usage=usage)  # fmt: skip

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(lambda r: not r.has_tool("sessions_spawn"), subagent)
    )


def _statuses(url: str, prefix: str) -> list[RunStatus]:
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        return sorted(r.status for r in RunsRegistry(redis=client, keys=Keys(prefix=prefix)).all())
    finally:
        client.close()


async def _page_html(port: int) -> str:
    timeout = aiohttp.ClientTimeout(total=30)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://{LOOPBACK}:{port}/ops?refresh=0", headers=headers) as response,
    ):
        response.raise_for_status()
        return await response.text()


async def _stack_page(work: Path) -> str:
    with RedisServer(data_dir=work / "redis") as server:
        async with FakeOpenAI(_model(), models=["gpt-4o-mini"]) as fake:
            values = {
                "redis_url": server.url,
                "openai": {"base_url": fake.base_url, "model": "gpt-4o-mini", "max_retries": 0},
                "prices": {"gpt-4o-mini": {"input": 0.15, "output": 0.6}},
                "subagents": {"max_concurrent": 2, "heartbeat_seconds": 0.5},
                "gateway": {"http_host": LOOPBACK, "http_port": 0},
                "ops": {"token": TOKEN, "refresh_seconds": 0},
            }
            channel = MemoryChannel()
            async with Stack(values=values, adapters=[channel], workers=2,
                             log_dir=work / "logs") as stack:  # fmt: skip
                await channel.say("compare redis streams and kafka for our outbox")
                prefix = stack.settings.key_prefix
                await stack.wait_for(lambda: _statuses(server.url, prefix) == EXPECTED, timeout=90)
                await asyncio.sleep(2)  # the running runs show a few seconds, not 0s
                assert stack.gateway is not None and stack.gateway.http_port is not None
                return await _page_html(stack.gateway.http_port)


def screenshot(html: Path, out: Path, *, chromium: str, profile: Path) -> None:
    """Draw ``html`` at :data:`SIZE` into the PNG ``out``."""
    width, height = SIZE
    subprocess.run(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
         f"--window-size={width},{height}", f"--screenshot={out}", html.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")


def capture(out: Path) -> None:
    """Start the stack, read its ops page, and screenshot it into ``out``."""
    chromium = find_chromium()
    with tempfile.TemporaryDirectory(prefix="fanbot-docs-ops-") as tmp:
        work = Path(tmp)
        (work / "logs").mkdir()
        html = work / "ops.html"
        html.write_text(asyncio.run(_stack_page(work)), encoding="utf-8")
        screenshot(html, out, chromium=chromium, profile=work / "chromium")
