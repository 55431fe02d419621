"""``fanbot bench many``: 1,000 subagents running at once in the threads pool.

Processes: a private Redis; ``fanbot gateway`` with the Telegram channel pointed at
:class:`~bot.testing.fake_telegram.FakeTelegram`; ``fanbot worker --pool threads`` with
``processes`` worker processes of ``concurrency`` runs each; ``subagents.max_concurrent`` =
``runs``. The fake model (:class:`StreamingModel`, in this process) streams each run's
answer slowly: a chunk every ``chunk_seconds`` for ``stream_seconds``, so every run holds its
model stream open meanwhile and all of them run at once. Runs are created by the real spawn
path into forum topics and announced through outbox -> gateway -> Telegram.

Figures (:class:`~bot.bench.many_report.ManyResult`): model streams open at once (max),
the total PSS of all worker processes (launcher included) idle and at its peak while the
runs stream, lost and duplicated announces, model returns -> announce accepted p50 / p99.
"""

from __future__ import annotations

import asyncio
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
from bot.bench.compare_env import pss
from bot.bench.many_report import ManyResult
from bot.bench.soak_report import announces
from bot.config import Settings
from bot.deps import Deps
from bot.errors import FanbotError
from bot.redis.server import RedisServer
from bot.store.jobs import SUBAGENTS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import ChatRequest, Fail, Reply, Text
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env

FORUM = forum(-1001000000779, "many")
FIRST_TOPIC = 300
LABEL = r"many-\d{5}"
_TASK = re.compile(rf"many task ({LABEL})")
_LABEL_IN_TEXT = re.compile(LABEL)
CHUNK_CHARS = 8  # the fake's characters per streamed chunk
POLL = 0.5
PSS_EVERY = 2.0  # seconds between two PSS samples (reading 1,000 threads' maps takes a while)


class ManyError(FanbotError):
    """The benchmark could not run (a process did not start or died, or it timed out)."""


@dataclass(frozen=True, kw_only=True)
class ManyConfig:
    """Knobs of one run (the CLI's options)."""

    runs: int = 1000
    processes: int = 4
    concurrency: int | None = None  # runs per process (default: its share + the dequeuers')
    stream_seconds: float = 45.0
    chunk_seconds: float = 1.0
    topics: int = 20
    pss_goal_mb: float = 1536.0
    timeout: float | None = None  # for every run to be announced (default: see wait_seconds)
    log_dir: Path
    report: Callable[[str], None] | None = None
    stopping: threading.Event | None = None  # set (SIGTERM, Ctrl-C): stop at the next wait

    @property
    def threads_concurrency(self) -> int:
        return self.concurrency or threads_concurrency(self.runs, self.processes)

    @property
    def wait_seconds(self) -> float:
        return self.timeout or self.stream_seconds + 120 + self.runs / 5


class StreamingModel:
    """Answers every run with a text streamed one chunk per ``chunk_seconds`` for about
    ``seconds``; records when each run's request arrived (``time.monotonic()``)."""

    def __init__(self, *, seconds: float, chunk_seconds: float) -> None:
        self.chunk_seconds = chunk_seconds
        self.chunks = max(1, round(seconds / chunk_seconds)) + 1  # the first is sent at once
        self.arrived: dict[str, float] = {}
        self.unknown = 0

    def __call__(self, request: ChatRequest) -> Reply:
        found = _TASK.search(request.last_user_message)
        if found is None:
            self.unknown += 1
            return Fail(400, message="many: a request that belongs to no run")
        self.arrived.setdefault(found[1], time.monotonic())
        text = f"result of {found[1]} ".ljust(CHUNK_CHARS * self.chunks, ".")
        return Text(text, chunk_delay=self.chunk_seconds)


@dataclass(kw_only=True)
class _Env:
    config: ManyConfig
    deps: Deps
    pool: WorkerPool
    gateway: GatewayProcess
    tg: FakeTelegram
    fake: FakeOpenAI
    ids: dict[str, str] = field(default_factory=dict)  # label -> run id
    pss: dict[str, int] = field(default_factory=dict)  # "idle", "peak", "fullest"
    peak_streams: int = 0  # model streams open when the peak PSS was read
    fullest_streams: int = 0  # the most model streams open at a PSS reading
    max_streams: int = 0
    times: dict[str, float] = field(default_factory=dict)  # time.monotonic() of each step
    pss_samples: int = 0
    sampled_at: float = 0.0  # time.monotonic() of the last PSS reading

    def say(self, line: str) -> None:
        if self.config.report is not None:
            self.config.report(line)

    def pids(self) -> list[int]:
        launcher = [self.pool.launcher.pid] if self.pool.launcher is not None else []
        return launcher + self.pool.worker_pids()


async def run_many(config: ManyConfig) -> ManyResult:
    """Run the benchmark and return its figures (lost runs are counted, not raised)."""
    config.log_dir.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    model = StreamingModel(seconds=config.stream_seconds, chunk_seconds=config.chunk_seconds)
    topics = range(FIRST_TOPIC, FIRST_TOPIC + config.topics)
    with ExitStack() as resources:
        url = resources.enter_context(RedisServer(data_dir=config.log_dir / "redis")).url
        fake = FakeOpenAI(model, models=["fake-model"], stream_chunk_chars=CHUNK_CHARS)
        async with fake, FakeTelegram() as tg:
            for topic in topics:
                tg.add_topic(FORUM, topic)
            values = telegram_bench_values(
                redis_url=url, model_url=fake.base_url, tg=tg, log_dir=config.log_dir,
                log_level="WARNING", subagents={"max_concurrent": config.runs},
            )  # fmt: skip
            env = hermetic_env(values)
            many = _Env(
                config=config,
                deps=Deps.build(Settings(**values)),
                pool=WorkerPool(
                    env=env,
                    count=config.processes,
                    log_path=config.log_dir / "workers.log",
                    args=pool_args("threads", concurrency=config.threads_concurrency),
                ),
                gateway=GatewayProcess(env=env, log_path=config.log_dir / "gateway.log"),
                tg=tg,
                fake=fake,
            )
            try:
                await asyncio.to_thread(_measure, many, list(topics))
                result = await asyncio.to_thread(_result, many, model, load_start)
            finally:
                await asyncio.to_thread(many.gateway.stop)
                await asyncio.to_thread(many.pool.stop)
                many.deps.close()
    return result


def _measure(many: _Env, topics: list[int]) -> None:
    config = many.config
    many.pool.start()
    many.gateway.start()
    _until(many, lambda: _ready(many), timeout=120, what="gateway and workers to start")
    time.sleep(1.0)  # past the workers' start-up
    many.pss["idle"] = pss(many.pids())
    many.say(f"many: spawning {config.runs} runs")
    many.times["spawn"] = time.monotonic()
    for n in range(config.runs):
        _require_alive(many)
        label = f"many-{n:05d}"
        many.ids[label] = spawn_in_topic(
            many.deps, bot_id=many.tg.bot_id, chat=FORUM["id"], topic=topics[n % len(topics)],
            task=f"many task {label}: answer in one line", label=label,
        )  # fmt: skip
        _sample(many)
    many.times["spawned"] = time.monotonic()
    many.say(f"many: {config.runs} spawned; waiting for their announces")
    last_report = time.monotonic()

    def done() -> bool:
        nonlocal last_report
        _sample(many)
        labels = {a.label for a in announces(many.tg.messages, label=LABEL)}
        if time.monotonic() - last_report >= 10:
            last_report = time.monotonic()
            many.say(f"many: {many.fake.in_flight} streaming, {len(labels)} announced")
        if len(labels & many.ids.keys()) < len(many.ids):
            return False
        many.times.setdefault("announced", time.monotonic())
        active = int(many.deps.redis.scard(many.deps.keys.active_runs))
        return active == 0 and probes.outbox_drained(many.deps.redis, many.deps.keys)

    _until(many, done, timeout=config.wait_seconds, what=f"{config.runs} announces")


def _sample(many: _Env) -> None:
    """Note the model streams open; every :data:`PSS_EVERY` seconds read the workers' PSS,
    keeping the peak and the streams open at that moment."""
    many.max_streams = max(many.max_streams, many.fake.in_flight)
    if time.monotonic() - many.sampled_at < PSS_EVERY:
        return
    streams = many.fake.in_flight
    size = pss(many.pids())
    many.sampled_at = time.monotonic()
    many.pss_samples += 1
    if size > many.pss.get("peak", 0):
        many.pss["peak"], many.peak_streams = size, streams
    if (streams, size) > (many.fullest_streams, many.pss.get("fullest", 0)):
        many.pss["fullest"], many.fullest_streams = size, streams


def _until(many: _Env, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    wait_until(check, problem=lambda: _problem(many), error=ManyError, timeout=timeout,
               what=what, poll=POLL)  # fmt: skip


def _require_alive(many: _Env) -> None:
    problem = _problem(many)
    if problem is not None:
        raise ManyError(problem)


def _problem(many: _Env) -> str | None:
    return stack_problem(stopping=many.config.stopping, gateway=many.gateway, pool=many.pool)


def _ready(many: _Env) -> bool:
    pids = set(many.pool.worker_pids())
    queue = Queue(SUBAGENTS_QUEUE, connection=many.deps.redis)
    registered = sum(worker.pid in pids for worker in Worker.all(queue=queue))
    return registered >= many.config.processes and bool(many.tg.calls_to("getUpdates"))


def _result(
    many: _Env, model: StreamingModel, load_start: tuple[float, float, float]
) -> ManyResult:
    config = many.config
    records = {r.run_id: r for r in many.deps.runs.get_many(many.ids.values())}
    sent = Counter(a.label for a in announces(many.tg.messages, label=LABEL))
    terminal = {
        label for label, run in many.ids.items() if run in records and records[run].status.terminal
    }
    load_end = os.getloadavg()
    return ManyResult(
        runs=config.runs,
        processes=config.processes,
        concurrency=config.threads_concurrency,
        stream=f"a chunk every {config.chunk_seconds:g} s for {config.stream_seconds:g} s",
        max_streams=many.max_streams,
        peak_streams=many.peak_streams,
        pss_idle=many.pss.get("idle", 0),
        pss_peak=many.pss.get("peak", 0),
        pss_fullest=many.pss.get("fullest", 0),
        fullest_streams=many.fullest_streams,
        spawn_seconds=many.times["spawned"] - many.times["spawn"],
        announced_seconds=many.times.get("announced", time.monotonic()) - many.times["spawn"],
        pss_samples=many.pss_samples,
        pss_goal=int(config.pss_goal_mb * 1024 * 1024),
        not_terminal=sorted(set(many.ids) - terminal),
        not_announced=sorted(label for label in many.ids if not sent[label]),
        duplicated={label: n for label, n in sent.items() if n > 1 and label in many.ids},
        statuses=Counter(r.status.value for r in records.values()),
        announce_delays=_announce_delays(many),
        model_unknown=model.unknown,
        logs={
            "gateway": probes.log_problems(config.log_dir / "gateway.log"),
            "workers": probes.log_problems(config.log_dir / "workers.log"),
        },
        machine=f"{os.cpu_count()} CPUs; load average (1 min) {load_start[0]:.2f} at start, "
        f"{load_end[0]:.2f} at end",
        log_dir=str(config.log_dir),
    )


def _announce_delays(many: _Env) -> list[float]:
    """Per run: its model stream's end -> its announce accepted by Telegram (seconds)."""
    ended = {}
    for request in list(many.fake.requests):
        found = _TASK.search(request.chat.last_user_message)
        if found and request.finished_at is not None and request.outcome == "ok":
            ended[found[1]] = request.finished_at
    accepted: dict[str, float] = {}
    for call in list(many.tg.calls):
        if call.status != 200 or call.method != "sendMessage":
            continue
        text = str(call.params.get("text", ""))
        hit = _LABEL_IN_TEXT.search(text) if "Status: " in text else None
        if hit and hit[0] not in accepted:
            accepted[hit[0]] = call.at
    return [accepted[label] - ended[label] for label in accepted if label in ended]
