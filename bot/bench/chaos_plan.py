"""What each chaos run does, and the fakes that play it: a seeded plan, the scripted model,
the page server ``web_fetch`` reads, and the kill schedule.

Every run's task names its label (``chaos task chaos-0042``); the model reads the label and
the step (the answers already in the request) and answers from the plan, so a resumed
attempt gets the answer the lost one would have got. Each run takes 2-4 steps: 1-3 tool
calls among ``write_file`` (a new path per run and step: run twice, the second says the file
exists), ``execute`` (appends a line to a file per run and step and prints the line count:
run twice, it prints 2) and ``web_fetch`` (a page per run and step on a loopback server
that counts its fetches, and answers after :data:`FETCH_SECONDS`), then a text answer. Each
answer comes after 0.5-3 s. A main-agent turn (a user message in a private chat of its own)
is answered with one line naming it.
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from dataclasses import dataclass

from aiohttp import web

from bot.testing.scripted import Call, ChatRequest, Fail, Reply, Text, ToolCalls

TOOLS = ("write_file", "execute", "web_fetch")
NOT_REPEATABLE = ("write_file", "execute")
FETCH_SECONDS = 1.0
EXECUTE_SECONDS = 1
_LABEL = re.compile(r"chaos task (chaos-\d+)")
_TURN = re.compile(r"chaos turn (\d+)")
TURN_REPLY = "reply to chaos turn {n}"


@dataclass(frozen=True, kw_only=True)
class PlannedRun:
    """One run: its label, forum topic, tool calls (in order) and the model's delay before
    each answer (one more than the tools: the last answer is the text)."""

    label: str
    topic: int
    tools: tuple[str, ...]
    delays: tuple[float, ...]

    @property
    def task(self) -> str:
        return f"chaos task {self.label}: use the tools, then answer in one line"

    @property
    def model_seconds(self) -> float:
        return sum(self.delays) + sum(FETCH_SECONDS for t in self.tools if t == "web_fetch")


@dataclass(frozen=True, kw_only=True)
class Kill:
    """One planned kill: when (seconds after the first spawn) and what (``host``: a whole
    pool, launcher and workers; ``process``: one worker process running jobs)."""

    at: float
    kind: str


def make_plan(
    *, runs: int, seed: int, topics: list[int], tools: tuple[str, ...], delays: tuple[float, float]
) -> list[PlannedRun]:
    rng = random.Random(seed)
    width = max(4, len(str(runs - 1)))
    plan = []
    for index in range(runs):
        steps = rng.randint(2, 4)
        chosen = tuple(rng.choice(tools) for _ in range(steps - 1))
        plan.append(
            PlannedRun(
                label=f"chaos-{index:0{width}d}",
                topic=topics[index % len(topics)],
                tools=chosen,
                delays=tuple(round(rng.uniform(*delays), 3) for _ in range(steps)),
            )
        )
    return plan


def hosts_to_kill(kills: int) -> int:
    """Whole-host kills among ``kills``: at least 2 from 4 kills on, one in five beyond 10."""
    return min(kills // 2, max(2, kills // 5))


def make_kills(*, kills: int, seed: int, window: tuple[float, float], gap: float) -> list[Kill]:
    """``kills`` moments spread at random over ``window`` (at least ``gap`` apart); the host
    kills fall in the middle of the order, so runs are running when each host dies."""
    rng = random.Random(seed + 2)
    start, end = window
    span = max(end - start, gap * kills)
    moments = sorted(rng.uniform(0, span - gap * kills) for _ in range(kills))
    moments = [start + m + gap * i for i, m in enumerate(moments)]
    hosts = hosts_to_kill(kills)
    spots = set(rng.sample(range(1, max(2, kills - 1)), min(hosts, max(1, kills - 2))))
    if len(spots) < hosts:  # too few kills to keep hosts off the ends
        spots |= set(range(kills - (hosts - len(spots)), kills))
    return [Kill(at=at, kind="host" if i in spots else "process") for i, at in enumerate(moments)]


def step_of(request: ChatRequest) -> int:
    """The step a request asks for: how many answers it already holds."""
    return sum(1 for m in request.messages if m.get("role") == "assistant")


def label_of(request: ChatRequest) -> str | None:
    for message in request.messages:
        if message.get("role") == "user":
            found = _LABEL.search(str(message.get("content") or ""))
            if found:
                return found[1]
    return None


def turn_of(request: ChatRequest) -> int | None:
    return turn_of_text(request.last_user_message)


def turn_of_text(text: str) -> int | None:
    found = _TURN.search(text)
    return int(found[1]) if found else None


def tool_path(label: str, step: int, tool: str) -> str:
    return f"/{label}-{step}-{tool}.txt"  # the workspace's root: execute's cwd


class ChaosModel:
    """The fake model's script for a plan (thread-safe)."""

    def __init__(self, plan: list[PlannedRun], *, pages: str, turn_delays: list[float]) -> None:
        self.plan = {run.label: run for run in plan}
        self.pages = pages  # the page server's base URL
        self.turn_delays = turn_delays
        self.unknown = 0
        self.turns: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> Reply:
        if request.has_tool("sessions_spawn"):
            turn = turn_of(request)
            if turn is None or turn >= len(self.turn_delays):
                return self._unknown()
            with self._lock:
                self.turns[turn] += 1
            return Text(TURN_REPLY.format(n=turn), delay=self.turn_delays[turn])
        label = label_of(request)
        run = self.plan.get(label) if label else None
        if run is None:
            return self._unknown()
        step = step_of(request)
        delay = run.delays[min(step, len(run.delays) - 1)]
        if step >= len(run.tools):
            return Text(f"result of {run.label}", delay=delay)
        return ToolCalls([self.call(run, step)], delay=delay)

    def call(self, run: PlannedRun, step: int) -> Call:
        tool = run.tools[step]
        path = tool_path(run.label, step, tool)
        if tool == "write_file":
            return Call("write_file", {"file_path": path, "content": f"{run.label} step {step}"})
        if tool == "execute":
            command = f"sleep {EXECUTE_SECONDS}; echo x >> {path[1:]}; wc -l < {path[1:]}"
            return Call("execute", {"command": command})
        return Call("web_fetch", {"url": f"{self.pages}/page/{run.label}/{step}"})

    def _unknown(self) -> Reply:
        with self._lock:
            self.unknown += 1
        return Fail(400, message="chaos: a request that belongs to no planned run or turn")


class PageServer:
    """Pages for ``web_fetch`` on loopback: ``/page/<label>/<step>``, each answered after
    :data:`FETCH_SECONDS`; counts the fetches of each path."""

    def __init__(self) -> None:
        self.fetches: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> PageServer:
        import asyncio

        async def page(request: web.Request) -> web.Response:
            self.fetches[request.path] += 1
            await asyncio.sleep(FETCH_SECONDS)
            text = f"page {request.match_info['label']} step {request.match_info['step']}"
            return web.Response(text=text, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/page/{label}/{step}", page)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
