"""What each soak run does: a seeded plan, and the scripted fake model that plays it.

Every run's task names its label (``soak task soak-0042``); the model looks the label up in
the plan, so answers depend on the run, never on the order in which workers ask.
"""

from __future__ import annotations

import enum
import random
import re
import threading
from collections import Counter
from dataclasses import dataclass

from bot.testing.scripted import Call, ChatRequest, Fail, Hang, Reply, Text, ToolCalls
from bot.types import RunStatus

HANG_RUN_TIMEOUT = 2
"""``runTimeoutSeconds`` of the runs whose model call hangs (they must end ``timeout``)."""
HANG_SECONDS = 30.0
RATE_LIMIT_RETRY_AFTER = 0.2
_LABEL = re.compile(r"soak task (soak-\d+)")


class Kind(enum.StrEnum):
    """What the fake model does for a run."""

    OK = "ok"  # one answer after a random delay
    TOOL = "tool"  # a current_time call first, then the answer
    RATE_LIMITED = "429"  # HTTP 429 with retry-after on the first try, then the answer
    FAIL = "500"  # HTTP 500 on every try: the run ends error after the client's retries
    HANG = "hang"  # no answer: the run ends timeout at its 2 s deadline


EXPECTED: dict[Kind, RunStatus] = {
    Kind.OK: RunStatus.SUCCESS,
    Kind.TOOL: RunStatus.SUCCESS,
    Kind.RATE_LIMITED: RunStatus.SUCCESS,
    Kind.FAIL: RunStatus.ERROR,
    Kind.HANG: RunStatus.TIMEOUT,
}


@dataclass(frozen=True, kw_only=True)
class PlannedRun:
    """One run of the soak: its label, behaviour, model delay and forum topic."""

    label: str
    kind: Kind
    delay: float
    topic: int

    @property
    def task(self) -> str:
        return f"soak task {self.label}: answer in one line"

    @property
    def expected(self) -> RunStatus:
        return EXPECTED[self.kind]


def make_plan(
    *,
    runs: int,
    seed: int,
    topics: list[int],
    max_delay: float,
    fail_rate: float,
    hang_rate: float,
    tool_rate: float,
) -> list[PlannedRun]:
    """``runs`` planned runs; ``fail_rate`` is split evenly between HTTP 500 and 429."""
    rng = random.Random(seed)
    width = max(4, len(str(runs - 1)))
    plan = []
    for index in range(runs):
        draw = rng.random()
        if draw < hang_rate:
            kind = Kind.HANG
        elif draw < hang_rate + fail_rate / 2:
            kind = Kind.FAIL
        elif draw < hang_rate + fail_rate:
            kind = Kind.RATE_LIMITED
        elif draw < hang_rate + fail_rate + tool_rate:
            kind = Kind.TOOL
        else:
            kind = Kind.OK
        plan.append(
            PlannedRun(
                label=f"soak-{index:0{width}d}",
                kind=kind,
                delay=round(rng.uniform(0, max_delay), 3),
                topic=topics[index % len(topics)],
            )
        )
    return plan


class SoakModel:
    """The fake model's script for a plan (thread-safe; counts attempts per run)."""

    def __init__(self, plan: list[PlannedRun]) -> None:
        self.plan = {run.label: run for run in plan}
        self.attempts: Counter[str] = Counter()
        self.unknown = 0
        self._lock = threading.Lock()

    def __call__(self, request: ChatRequest) -> Reply:
        found = _LABEL.search(request.last_user_message)
        run = self.plan.get(found[1]) if found else None
        if run is None or request.has_tool("sessions_spawn"):
            with self._lock:
                self.unknown += 1
            return Fail(400, message="soak: a request that belongs to no planned run")
        with self._lock:
            self.attempts[run.label] += 1
            attempt = self.attempts[run.label]
        return self._reply(run, request, attempt)

    @staticmethod
    def _reply(run: PlannedRun, request: ChatRequest, attempt: int) -> Reply:
        if run.kind is Kind.HANG:
            return Hang(HANG_SECONDS)
        if run.kind is Kind.FAIL:
            return Fail(500, message=f"soak: injected failure for {run.label}")
        if run.kind is Kind.RATE_LIMITED and attempt == 1:
            return Fail(429, retry_after=RATE_LIMIT_RETRY_AFTER)
        if run.kind is Kind.TOOL and not request.tool_results:
            return ToolCalls([Call("current_time", {})], delay=run.delay / 2)
        return Text(f"result of {run.label}", delay=run.delay)
