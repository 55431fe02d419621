"""``fanbot bench chaos``: subagent runs with tools while workers are SIGKILLed at random.

Processes: a private Redis, ``fanbot gateway`` (Telegram channel on
:class:`~bot.testing.fake_telegram.FakeTelegram`) and two worker "hosts", each a ``fanbot
worker`` launcher with its worker processes (:class:`~bot.testing.stack.WorkerPool`), in
the fork or the threads pool. The fake model, the fake Bot API and the page server
``web_fetch`` reads run in this process. Runs are spawned through the real spawn path into
forum topics (:mod:`bot.bench.chaos_plan` says what each does); main-agent turns arrive as
user messages, one private chat each, spread over the same time.

Meanwhile ``kills`` SIGKILLs land at planned random moments: most on one worker process
running jobs (threads pool: the worker process, every run it holds; fork pool: a work horse
alone, or a worker with its horse), and at least two on a whole host (its launcher, workers
and horses), after which a fresh launcher starts in its place. Each run the killed processes
held is watched until its next attempt starts (its recovery job cleared ``resuming``): that
is its resume latency.

Figures (:class:`~bot.bench.chaos_report.ChaosResult`): lost runs, duplicated announces,
statuses (``unknown``), resume latency per kind of kill, model calls repeated per run and
kill, tool calls reported interrupted to the model, tool calls not safe to repeat that ran
twice (``write_file``: the second says the file exists; ``execute``: it prints the count of
lines it appended), pages fetched twice, and the turns answered exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from rq import Worker
from rq.job import Job, JobStatus

from bot.agent.tools.sandbox import sandbox_status
from bot.bench import probes
from bot.bench.bench_stack import (
    pool_args,
    spawn_in_topic,
    telegram_bench_values,
    threads_concurrency,
    wait_until,
)
from bot.bench.chaos_plan import (
    NOT_REPEATABLE,
    TOOLS,
    ChaosModel,
    Kill,
    PageServer,
    PlannedRun,
    make_kills,
    make_plan,
    turn_of_text,
)
from bot.bench.chaos_report import ChaosResult, Hit, analyse
from bot.config import Settings
from bot.deps import Deps
from bot.errors import FanbotError
from bot.redis.server import RedisServer
from bot.store.jobs import TURNS_QUEUE
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_telegram import FakeTelegram, forum, private, user
from bot.testing.stack import GatewayProcess, WorkerPool, hermetic_env
from bot.types import RunRecord

FORUM = forum(-1001000000780, "chaos")
FIRST_TOPIC = 400
FIRST_TURN_CHAT = 7000
POLL = 0.25
WATCH = 0.05  # seconds between two readings of the killed runs
WATCH_SECONDS = 60.0  # a killed run not going on by then is counted "not resumed"
HOSTS = ("a", "b")
TURN_HUNT_SECONDS = 15.0


class ChaosError(FanbotError):
    """The benchmark could not run (a process did not start, or the gateway died)."""


@dataclass(frozen=True, kw_only=True)
class ChaosConfig:
    """Knobs of one chaos run in one pool (the CLI's options)."""

    runs: int = 200
    kills: int = 12
    pool: str = "threads"
    seed: int = 1
    max_concurrent: int = 8
    workers: int | None = None  # per host; default: fork max_concurrent + 2, threads 2
    turns: int = 20
    topics: int = 10
    delays: tuple[float, float] = (0.5, 3.0)
    timeout: float | None = None  # for every run to end; default 180 s + 1 s per run
    log_dir: Path
    report: Callable[[str], None] | None = None
    stopping: threading.Event | None = None

    @property
    def per_host(self) -> int:
        """Worker processes per host: by default one host alone carries every run the cap
        lets run, and turns beside them (fork: one process per job), so the runs of a host
        that dies find room on the other at once."""
        return self.workers or (self.max_concurrent + 2 if self.pool == "fork" else 2)

    @property
    def threads_concurrency(self) -> int:
        """Jobs at once per threads-pool process: one host's share of the whole cap."""
        return threads_concurrency(self.max_concurrent, self.per_host)


@dataclass(kw_only=True)
class _Env:
    config: ChaosConfig
    deps: Deps
    hosts: dict[str, WorkerPool]
    gateway: GatewayProcess
    tg: FakeTelegram
    plan: list[PlannedRun]
    rng: random.Random
    ids: dict[str, str] = field(default_factory=dict)  # label -> run id
    hits: list[Hit] = field(default_factory=list)
    kills_done: list[dict[str, object]] = field(default_factory=list)
    turns_sent: int = 0
    t0: float = 0.0

    def say(self, line: str) -> None:
        if self.config.report is not None:
            self.config.report(line)

    def problem(self) -> str | None:
        if self.config.stopping is not None and self.config.stopping.is_set():
            return "interrupted; its processes are stopped"
        if self.gateway.returncode() is not None:
            return f"the gateway exited:\n{self.gateway.log()[-3000:]}"
        return None

    def require(self) -> None:
        found = self.problem()
        if found is not None:
            raise ChaosError(found)


def tools_here(settings: Settings) -> tuple[tuple[str, ...], str]:
    """The tools the runs call, and a note when ``execute`` cannot run here (no sandbox)."""
    status = sandbox_status(settings.sandbox)
    if status.available:
        return TOOLS, ""
    note = f"execute left out: the sandbox is not available ({status.detail})"
    return tuple(t for t in TOOLS if t != "execute"), note


async def run_chaos(config: ChaosConfig) -> ChaosResult:
    """One chaos run in one pool; its figures (goals missed are counted, not raised)."""
    config.log_dir.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    began = time.monotonic()
    topics = list(range(FIRST_TOPIC, FIRST_TOPIC + config.topics))
    tools, note = tools_here(Settings())
    plan = make_plan(runs=config.runs, seed=config.seed, topics=topics, tools=tools,
                     delays=config.delays)  # fmt: skip
    rng = random.Random(config.seed + 3)
    turn_delays = [round(rng.uniform(*config.delays), 3) for _ in range(config.turns)]
    with ExitStack() as resources:
        url = resources.enter_context(RedisServer(data_dir=config.log_dir / "redis")).url
        async with PageServer() as pages:
            model = ChaosModel(plan, pages=pages.url, turn_delays=turn_delays)
            async with FakeOpenAI(model, models=["fake-model"]) as fake, FakeTelegram() as tg:
                for topic in topics:
                    tg.add_topic(FORUM, topic)
                env = _environment(config, url, fake.base_url, tg, plan, rng)
                try:
                    await _chaos(env)
                    records = await asyncio.to_thread(_records, env)
                finally:
                    await asyncio.to_thread(_stop, env)
                result = analyse(
                    plan=plan, records=records, requests=[r.chat for r in fake.requests],
                    messages=tg.messages, fetches=pages.fetches, hits=env.hits,
                    turns=env.turns_sent, first_turn_chat=FIRST_TURN_CHAT,
                    max_resumes=env.deps.settings.subagents.max_resumes,
                )  # fmt: skip
                result.model_unknown = model.unknown
    result.pool = config.pool
    result.kills = env.kills_done
    result.seconds = time.monotonic() - began
    result.load = (load_start[0], os.getloadavg()[0])
    result.parameters = _parameters(config, tools, env)
    result.notes = [note] if note else []
    result.logs = {name: probes.log_problems(config.log_dir / f"{name}.log")
                   for name in ("gateway", *(f"host-{h}" for h in HOSTS))}  # fmt: skip
    result.log_dir = str(config.log_dir)
    return result


def _environment(
    config: ChaosConfig, url: str, model_url: str, tg: FakeTelegram, plan: list[PlannedRun],
    rng: random.Random,
) -> _Env:  # fmt: skip
    values = telegram_bench_values(
        redis_url=url, model_url=model_url, tg=tg, log_dir=config.log_dir, log_level="INFO",
        subagents={"max_concurrent": config.max_concurrent, "archive_after_minutes": 60},
    )  # fmt: skip
    values["web"] = {"allow_hosts": ["127.0.0.1"]}  # web_fetch refuses loopback otherwise
    env = hermetic_env(values)
    args = pool_args(config.pool, concurrency=config.threads_concurrency)
    hosts = {
        name: WorkerPool(
            env=env, count=config.per_host, args=args, log_path=config.log_dir / f"host-{name}.log"
        )
        for name in HOSTS
    }
    return _Env(
        config=config, deps=Deps.build(Settings(**values)), hosts=hosts,
        gateway=GatewayProcess(env=env, log_path=config.log_dir / "gateway.log"),
        tg=tg, plan=plan, rng=rng,
    )  # fmt: skip


def _stop(env: _Env) -> None:
    env.gateway.stop()
    for host in env.hosts.values():
        host.stop()
    env.deps.close()


async def _chaos(env: _Env) -> None:
    config = env.config
    for host in env.hosts.values():
        host.start()
    env.gateway.start()
    await _wait(env, lambda: _ready(env), timeout=120, what="gateway and workers to start")
    env.t0 = time.monotonic()
    env.ids = await asyncio.to_thread(_spawn_all, env)
    estimate = sum(run.model_seconds for run in env.plan) / config.max_concurrent
    kills = make_kills(kills=config.kills, seed=config.seed, window=(2.0, 0.85 * estimate),
                       gap=3.0)  # fmt: skip
    env.say(f"chaos ({config.pool}): {config.runs} runs spawned; about {estimate:.0f} s of "
            f"work; kills at {', '.join(f'{k.at:.0f}' for k in kills)} s")  # fmt: skip
    tasks = [
        asyncio.create_task(_kill_all(env, kills)),
        asyncio.create_task(_send_turns(env, spacing=0.9 * estimate / max(1, config.turns))),
        asyncio.create_task(_watch_hits(env)),
    ]
    try:
        await _wait_for_runs(env, tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _wait(env: _Env, check: Callable[[], bool], *, timeout: float, what: str) -> None:
    await asyncio.to_thread(wait_until, check, problem=env.problem, error=ChaosError,
                            timeout=timeout, what=what, poll=POLL)  # fmt: skip


def _ready(env: _Env) -> bool:
    workers = Worker.count(connection=env.deps.redis)
    return workers >= env.config.per_host * len(HOSTS) and bool(env.tg.calls_to("getUpdates"))


def _spawn_all(env: _Env) -> dict[str, str]:
    ids = {}
    for run in env.plan:
        env.require()
        ids[run.label] = spawn_in_topic(env.deps, bot_id=env.tg.bot_id, chat=FORUM["id"],
                                        topic=run.topic, task=run.task, label=run.label)  # fmt: skip
    return ids


async def _send_turns(env: _Env, *, spacing: float) -> None:
    """One user message per turn, each in a private chat of its own, ``spacing`` apart."""
    for n in range(env.config.turns):
        person = user(FIRST_TURN_CHAT + n, f"User {n}")
        env.tg.push(env.tg.message(chat=private(person), sender=person,
                                   text=f"chaos turn {n}: say hello"))  # fmt: skip
        env.turns_sent += 1
        await asyncio.sleep(spacing)


async def _kill_all(env: _Env, kills: list[Kill]) -> None:
    for kill in kills:
        await asyncio.sleep(max(0.0, env.t0 + kill.at - time.monotonic()))
        done = await asyncio.to_thread(_kill, env, kill)
        env.kills_done.append(done)
        env.say(f"chaos ({env.config.pool}): kill {len(env.kills_done)}/{len(kills)} at "
                f"{time.monotonic() - env.t0:.0f} s: {done['what']}, "
                f"{done['runs']} run(s), turn(s) {done['turns'] or 'none'}")  # fmt: skip


def _kill(env: _Env, kill: Kill) -> dict[str, object]:
    """Carry out one kill now (or as soon as a process runs a job); what it hit."""
    if kill.kind == "host":
        # Both hosts up first (a fresh one may still be starting): a host dies while
        # another is there to notice, as the goal's p99 assumes.
        wait_until(lambda: all(_host_ready(env, h) for h in HOSTS), problem=env.problem,
                   error=ChaosError, timeout=60, what="both hosts to be up", poll=0.1)  # fmt: skip
        name = _host_to_kill(env)
        host = env.hosts[name]
        jobs = [job for pid in host.worker_pids() for job in _jobs_of(env, pid)]
        killed = time.time()
        host.kill_all()
        _note_hits(env, jobs, kind="host", killed=killed)
        host.start()  # a fresh supervisor in its place
        return _summary(f"host {name} (launcher, workers, horses)", jobs, env)
    # Every third process kill goes for a process answering a turn (for up to
    # TURN_HUNT_SECONDS), so the turns goal is tested under kills too.
    processes = sum(not str(k["what"]).startswith("host") for k in env.kills_done)
    turn_until = time.monotonic() + (TURN_HUNT_SECONDS if processes % 3 == 1 else 0)
    deadline = time.monotonic() + 20
    while True:
        victim = _victim(env, turn=time.monotonic() < turn_until)
        if victim is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if victim is None:
        return {"what": "nothing to kill (no worker ran a job for 20 s)", "runs": 0, "turns": []}
    what, pids, jobs = victim
    killed = time.time()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    _note_hits(env, jobs, kind="process", killed=killed)
    return _summary(what, jobs, env)


def _host_to_kill(env: _Env) -> str:
    """The host to kill: every other host kill (the first, the third...) goes for a host
    answering a turn (for up to TURN_HUNT_SECONDS), the others pick at random."""
    hosts = sum(str(k["what"]).startswith("host") for k in env.kills_done)
    deadline = time.monotonic() + (TURN_HUNT_SECONDS if hosts % 2 == 0 else 0)
    while time.monotonic() < deadline:
        answering = [name for name, host in env.hosts.items()
                     if any(j.origin == TURNS_QUEUE and j.get_status() is JobStatus.STARTED
                            for pid in host.worker_pids() for j in _jobs_of(env, pid))]  # fmt: skip
        if answering:
            return env.rng.choice(answering)
        time.sleep(0.1)
    return env.rng.choice(HOSTS)


def _victim(env: _Env, *, turn: bool) -> tuple[str, list[int], list[Job]] | None:
    """A worker process running jobs (``turn``: a turn among them), at random: (what, pids
    to kill, its jobs)."""
    busy = []
    for name, host in env.hosts.items():
        for pid in host.worker_pids():
            jobs = [j for j in _jobs_of(env, pid) if j.get_status() is JobStatus.STARTED]
            if jobs and (not turn or any(j.origin == TURNS_QUEUE for j in jobs)):
                busy.append((name, pid, jobs))
    if not busy:
        return None
    name, pid, jobs = env.rng.choice(busy)
    if env.config.pool == "threads":
        return f"worker process {pid} on host {name}", [pid], jobs
    horses = _children(pid)
    if env.rng.random() < 0.5:
        return f"work horse of worker {pid} on host {name}", horses, jobs
    return f"worker {pid} and its horse on host {name}", [*horses, pid], jobs


def _host_ready(env: _Env, name: str) -> bool:
    """Whether every worker process of host ``name`` is up and registered with RQ."""
    pids = set(env.hosts[name].worker_pids())
    registered = {w.pid for w in Worker.all(connection=env.deps.redis)}
    return len(pids) >= env.config.per_host and pids <= registered


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def _jobs_of(env: _Env, pid: int) -> list[Job]:
    return env.deps.rq.current_jobs(pid=pid, host=socket.gethostname())


def _note_hits(env: _Env, jobs: list[Job], *, kind: str, killed: float) -> None:
    runs = [r for r in (env.deps.jobs.current_run_id(job) for job in jobs) if r is not None]
    for record in env.deps.runs.get_many(runs):
        env.hits.append(Hit(run_id=record.run_id, kill=len(env.kills_done) + 1, kind=kind,
                            killed_at=killed, attempt=record.attempt))  # fmt: skip


def _summary(what: str, jobs: list[Job], env: _Env) -> dict[str, object]:
    runs = sum(env.deps.jobs.current_run_id(job) is not None for job in jobs)
    turns = sorted(_turn_number(job) for job in jobs if job.origin == TURNS_QUEUE)
    return {"what": what, "runs": runs, "turns": turns,
            "at": round(time.monotonic() - env.t0, 1)}  # fmt: skip


def _turn_number(job: Job) -> int:
    """The chaos turn a turn job answers (-1: another job)."""
    payload = job.args[0] if job.args and isinstance(job.args[0], dict) else {}
    found = turn_of_text(str(payload.get("text", "")))
    return -1 if found is None else found


async def _watch_hits(env: _Env) -> None:
    """Note when each killed run's next attempt starts (or the run ends instead)."""
    while True:
        pending = [h for h in env.hits if h.outcome == ""]
        if pending:
            await asyncio.to_thread(_check_hits, env, pending)
        await asyncio.sleep(WATCH)


def _check_hits(env: _Env, pending: list[Hit]) -> None:
    now = time.time()
    found = {r.run_id: r for r in env.deps.runs.get_many({h.run_id for h in pending})}
    for hit in pending:
        record = found.get(hit.run_id)
        if record is None:
            hit.outcome = "gone"
        elif record.attempt > hit.attempt and not record.resuming:
            hit.outcome, hit.resumed_after = "resumed", now - hit.killed_at
            hit.noticed_after = _noticed(record, hit)
        elif record.status.terminal:
            hit.outcome = f"ended {record.status.value}"
        elif now - hit.killed_at > WATCH_SECONDS:
            hit.outcome = "not resumed"


def _noticed(record: RunRecord, hit: Hit) -> float | None:
    """Seconds from the kill to the recovery script's decision (its ``attempt_ends``
    entry for the attempt killed)."""
    if len(record.attempt_ends) < hit.attempt:
        return None
    stamp = record.attempt_ends[hit.attempt - 1].partition("|")[0]
    try:
        return float(stamp) - hit.killed_at
    except ValueError:
        return None


async def _wait_for_runs(env: _Env, tasks: list[asyncio.Task[None]]) -> None:
    config, deps = env.config, env.deps
    deadline = time.monotonic() + (config.timeout or 180 + config.runs)
    last = time.monotonic()
    while True:
        active = await asyncio.to_thread(lambda: int(deps.redis.scard(deps.keys.active_runs)))
        drained = await asyncio.to_thread(probes.outbox_drained, deps.redis, deps.keys)
        kills_done = tasks[0].done()
        turns_done = tasks[1].done()
        watching = any(h.outcome == "" for h in env.hits)
        if active == 0 and drained and kills_done and turns_done and not watching:
            await asyncio.sleep(3)  # a late duplicate would show up meanwhile
            return
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise ChaosError(f"the bench failed: {task.exception()!r}")
        env.require()
        if time.monotonic() - last >= 10:
            last = time.monotonic()
            env.say(f"chaos ({config.pool}): {config.runs - active}/{config.runs} runs ended, "
                    f"{len(env.kills_done)}/{config.kills} kills, "
                    f"{time.monotonic() - env.t0:.0f} s")  # fmt: skip
        if time.monotonic() > deadline:
            env.say(f"chaos ({config.pool}): gave up waiting ({active} run(s) still active)")
            return
        await asyncio.sleep(POLL)


def _records(env: _Env) -> dict[str, RunRecord]:
    found = {r.run_id: r for r in env.deps.runs.get_many(env.ids.values())}
    return {label: found[run_id] for label, run_id in env.ids.items() if run_id in found}


def _parameters(config: ChaosConfig, tools: tuple[str, ...], env: _Env) -> dict[str, str]:
    pool = config.pool
    if pool == "threads":
        pool += f", {config.threads_concurrency} jobs at once per process"
    hosts = sum(1 for k in env.kills_done if str(k["what"]).startswith("host"))
    return {
        "runs / turns / max_concurrent": f"{config.runs} / {config.turns} / {config.max_concurrent}",
        "hosts x worker processes": f"{len(HOSTS)} x {config.per_host} ({pool})",
        "kills (host / process)": f"{len(env.kills_done)} ({hosts} / {len(env.kills_done) - hosts})",
        "tools (*: not safe to repeat)": ", ".join(
            f"{t}*" if t in NOT_REPEATABLE else t for t in tools
        ),
        "model delay": f"{config.delays[0]:g}-{config.delays[1]:g} s per answer",
        "seed": str(config.seed),
    }  # fmt: skip
