"""``fanbot bench ratelimit``: 64 runs against a model endpoint that allows 120 requests a
minute, on real workers (docs/architecture.md, "Fleet-wide model limits").

Processes: a private Redis; ``fanbot gateway`` on :class:`~bot.testing.fake_telegram.FakeTelegram`;
``fanbot worker --pool threads`` with ``processes`` worker processes, every run admitted at
once (``subagents.max_concurrent`` = ``runs``). The fake model (:class:`FakeOpenAI` with its
rate limit, in this process) answers each run ``calls`` times (tool calls, then the answer)
and a request over its limit with 429 and ``Retry-After``. The workers have
``openai.max_requests_per_minute`` set to the same limit, so their shared window should keep
every request under it.

Figures (:class:`RateLimitResult`): requests over the limit (goal 0), runs failed by 429
(goal 0), total time (first spawn -> every run announced) against the least the limit
allows, the runs seen waiting for the rate limit (their hash, as ``/subagents list`` shows
it), and the load average.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rq import Queue, Worker

from bot.bench import probes
from bot.bench.bench_stack import (
    pool_args,
    spawn_in_topic,
    stack_problem,
    telegram_bench_values,
    threads_concurrency,
    wait_until,
)
from bot.bench.ratelimit_report import RateLimitResult
from bot.bench.soak_report import announces
from bot.config import Settings
from bot.deps import Deps
from bot.errors import FanbotError
from bot.redis.server import RedisServer
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import Call, ChatRequest, Fail, Reply, Text, ToolCalls
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env

FORUM = forum(-1001000000781, "ratelimit")
FIRST_TOPIC = 500
LABEL = r"rl-\d{4}"
_TASK = re.compile(rf"ratelimit task ({LABEL})")
POLL = 0.5


class RateLimitBenchError(FanbotError):
    """The benchmark could not run (a process did not start or died, or it timed out)."""


@dataclass(frozen=True, kw_only=True)
class RateLimitConfig:
    """Knobs of one run (the CLI's options)."""

    runs: int = 64
    calls: int = 3  # model calls per run (calls - 1 tool steps, then the answer)
    limit: int = 120  # requests per minute the fake allows (and the workers are told)
    window_seconds: float = 60.0  # the fake's window; under 60 the minute is scaled to it
    limiter: bool = True  # False: the workers are not told the limit (the "before")
    processes: int = 2
    topics: int = 8
    timeout: float | None = None
    log_dir: Path
    report: Callable[[str], None] | None = None
    stopping: threading.Event | None = None

    @property
    def per_window(self) -> int:
        """Requests the fake allows per its window."""
        return max(1, self.limit * round(self.window_seconds * 1000) // 60_000)

    @property
    def least_seconds(self) -> float:
        """The least time the limit allows for every request: full windows before the last."""
        return (math.ceil(self.runs * self.calls / self.per_window) - 1) * self.window_seconds

    @property
    def wait_seconds(self) -> float:
        return self.timeout or self.least_seconds * 2 + 120


class PacedModel:
    """Answers each run ``calls`` times: ``calculate`` calls, then its result."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.unknown = 0

    def __call__(self, request: ChatRequest) -> Reply:
        found = _TASK.search(request.last_user_message)
        if found is None:
            self.unknown += 1
            return Fail(400, message="ratelimit: a request that belongs to no run")
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done + 1 < self.calls:
            return ToolCalls([Call("calculate", {"expression": f"{done}+1"})])
        return Text(f"result of {found[1]}")


@dataclass(kw_only=True)
class _Env:
    config: RateLimitConfig
    deps: Deps
    pool: WorkerPool
    gateway: GatewayProcess
    tg: FakeTelegram
    fake: FakeOpenAI
    ids: dict[str, str] = field(default_factory=dict)  # label -> run id
    seen_waiting: set[str] = field(default_factory=set)
    times: dict[str, float] = field(default_factory=dict)

    def say(self, line: str) -> None:
        if self.config.report is not None:
            self.config.report(line)


async def run_ratelimit(config: RateLimitConfig) -> RateLimitResult:
    """Run the benchmark and return its figures."""
    import asyncio

    config.log_dir.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    model = PacedModel(config.calls)
    topics = range(FIRST_TOPIC, FIRST_TOPIC + config.topics)
    with ExitStack() as resources:
        url = resources.enter_context(RedisServer(data_dir=config.log_dir / "redis")).url
        fake = FakeOpenAI(model, models=["fake-model"], max_requests=config.per_window,
                          window_seconds=config.window_seconds)  # fmt: skip
        async with fake, FakeTelegram() as tg:
            for topic in topics:
                tg.add_topic(FORUM, topic)
            values = telegram_bench_values(
                redis_url=url, model_url=fake.base_url, tg=tg, log_dir=config.log_dir,
                log_level="WARNING", subagents={"max_concurrent": config.runs},
            )  # fmt: skip
            values["openai"] |= {
                "max_requests_per_minute": config.limit if config.limiter else None,
                "limit_window_seconds": config.window_seconds,
                "max_retries": 2,
            }
            env = hermetic_env(values)
            bench = _Env(
                config=config,
                deps=Deps.build(Settings(**values)),
                pool=WorkerPool(
                    env=env,
                    count=config.processes,
                    log_path=config.log_dir / "workers.log",
                    args=pool_args(
                        "threads", concurrency=threads_concurrency(config.runs, config.processes)
                    ),
                ),
                gateway=GatewayProcess(env=env, log_path=config.log_dir / "gateway.log"),
                tg=tg,
                fake=fake,
            )
            try:
                await asyncio.to_thread(_measure, bench, list(topics))
                result = await asyncio.to_thread(_result, bench, model, load_start)
            finally:
                await asyncio.to_thread(bench.gateway.stop)
                await asyncio.to_thread(bench.pool.stop)
                bench.deps.close()
    return result


def _measure(bench: _Env, topics: list[int]) -> None:
    config = bench.config
    bench.pool.start()
    bench.gateway.start()
    _until(bench, lambda: _ready(bench), timeout=120, what="gateway and workers to start")
    bench.say(f"ratelimit: spawning {config.runs} runs of {config.calls} model calls each")
    bench.times["spawn"] = time.monotonic()
    for n in range(config.runs):
        label = f"rl-{n:04d}"
        bench.ids[label] = spawn_in_topic(
            bench.deps, bot_id=bench.tg.bot_id, chat=FORUM["id"], topic=topics[n % len(topics)],
            task=f"ratelimit task {label}: answer in one line", label=label,
        )  # fmt: skip
    last_report = [time.monotonic()]

    def done() -> bool:
        records = bench.deps.runs.get_many(bench.ids.values())
        bench.seen_waiting |= {r.run_id for r in records if r.waiting}
        labels = {a.label for a in announces(bench.tg.messages, label=LABEL)}
        if time.monotonic() - last_report[0] >= 10:
            last_report[0] = time.monotonic()
            bench.say(
                f"ratelimit: {len(bench.fake.requests)} requests, {bench.fake.over_limit} over "
                f"the limit, {sum(1 for r in records if r.waiting)} runs waiting, "
                f"{len(labels)} announced"
            )
        if len(labels & bench.ids.keys()) < len(bench.ids):
            return False
        bench.times.setdefault("announced", time.monotonic())
        active = int(bench.deps.redis.scard(bench.deps.keys.active_runs))
        return active == 0 and probes.outbox_drained(bench.deps.redis, bench.deps.keys)

    _until(bench, done, timeout=config.wait_seconds, what=f"{config.runs} announces")


def _until(bench: _Env, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    def problem() -> str | None:
        return stack_problem(stopping=bench.config.stopping, gateway=bench.gateway, pool=bench.pool)

    wait_until(check, problem=problem, error=RateLimitBenchError, timeout=timeout, what=what,
               poll=POLL)  # fmt: skip


def _ready(bench: _Env) -> bool:
    pids = set(bench.pool.worker_pids())
    queue = Queue(SUBAGENTS_QUEUE, connection=bench.deps.redis)
    registered = sum(worker.pid in pids for worker in Worker.all(queue=queue))
    return registered >= bench.config.processes and bool(bench.tg.calls_to("getUpdates"))


def _result(
    bench: _Env, model: PacedModel, load_start: tuple[float, float, float]
) -> RateLimitResult:
    config = bench.config
    records = bench.deps.runs.get_many(bench.ids.values())
    failed_429 = sum(
        1
        for r in records
        if r.status.value != "success" and ("rate" in r.notes or "429" in r.notes)
    )
    requests = bench.fake.requests
    load_end = os.getloadavg()
    sent = Counter(a.label for a in announces(bench.tg.messages, label=LABEL))
    return RateLimitResult(
        runs=config.runs,
        calls=config.calls,
        limit=config.limit,
        window_seconds=config.window_seconds,
        per_window=config.per_window,
        limiter=config.limiter,
        requests=len(requests),
        answered=sum(1 for r in requests if r.status == 200),
        over_limit=bench.fake.over_limit,
        failed_429=failed_429,
        statuses=Counter(r.status.value for r in records),
        seen_waiting=len(bench.seen_waiting),
        total_seconds=bench.times.get("announced", time.monotonic()) - bench.times["spawn"],
        least_seconds=config.least_seconds,
        not_announced=sorted(label for label in bench.ids if not sent[label]),
        model_unknown=model.unknown,
        machine=f"{os.cpu_count()} CPUs; load average (1 min) {load_start[0]:.2f} at start, "
        f"{load_end[0]:.2f} at end",
        log_dir=str(config.log_dir),
    )
