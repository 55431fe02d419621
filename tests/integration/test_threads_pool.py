"""The threads pool's worker (workers/threaded.py) against a real Redis, in this process:
runs at once as registered RQ executions, one heartbeat round trip for all, stop aborts
the run, an overdue stop is fenced and the process drains, max_runs recycles it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from rq import Queue, Worker
from rq.command import send_stop_job_command
from rq.job import JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from bot.config import Settings
from tests.integration import threads_jobs
from workers.context import WorkerContext
from workers.threaded import FairSlots, ThreadsWorker

QUEUE = "threads-test"


@pytest.fixture
def conn(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def context(redis_url: str) -> Iterator[WorkerContext]:
    built = WorkerContext.build(Settings(redis_url=redis_url))
    yield built
    built.close()


def make_worker(
    conn: redis.Redis, context: WorkerContext, *, concurrency: int = 4, **kwargs: object
) -> ThreadsWorker:
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    return ThreadsWorker(
        [queue],
        context=context,
        concurrency=concurrency,
        stop_grace=kwargs.pop("stop_grace", 5.0),  # type: ignore[arg-type]
        connection=conn,
        serializer=JSONSerializer,
        **kwargs,  # type: ignore[arg-type]
    )


def enqueue(conn: redis.Redis, func: object, *args: object) -> str:
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    return queue.enqueue(func, *args).id


def in_background(action: object, *, after: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(after), action()), daemon=True)  # type: ignore[operator]
    thread.start()
    return thread


def test_runs_share_one_process_as_registered_executions(
    conn: redis.Redis, context: WorkerContext
) -> None:
    ids = [enqueue(conn, threads_jobs.who, 1.5) for _ in range(4)]
    worker = make_worker(conn, context, concurrency=4)
    seen: dict[str, object] = {}

    def look() -> None:
        seen["started"] = StartedJobRegistry(QUEUE, connection=conn).count
        seen["executions"] = conn.scard(worker.executions_key)
        rq_worker = Worker.find_by_key(worker.key, connection=conn)
        seen["state"] = rq_worker.get_state() if rq_worker is not None else None

    in_background(look, after=0.8)
    started = time.monotonic()
    assert worker.work(burst=True)
    took = time.monotonic() - started
    assert seen == {"started": 4, "executions": 4, "state": "busy"}
    results = [Queue(QUEUE, connection=conn, serializer=JSONSerializer).fetch_job(i) for i in ids]
    values = [job.return_value() for job in results if job is not None]
    assert len(values) == 4
    assert len({v["pid"] for v in values}) == 1  # one process
    assert len({v["thread"] for v in values}) == 4  # each on its own thread
    assert {v["job"] for v in values} == set(ids)  # RQ's current job is per run
    assert all(v["served"] for v in values)  # the worker's context, per run
    assert took < 4 * 1.5  # at once, not one after the other
    assert conn.scard(worker.executions_key) == 0
    assert StartedJobRegistry(QUEUE, connection=conn).count == 0


def test_concurrency_bounds_the_runs_at_once(conn: redis.Redis, context: WorkerContext) -> None:
    for _ in range(3):
        enqueue(conn, threads_jobs.who, 0.8)
    worker = make_worker(conn, context, concurrency=1)
    peak = [0]

    def watch() -> None:
        for _ in range(20):
            peak[0] = max(peak[0], int(conn.scard(worker.executions_key)))
            time.sleep(0.1)

    in_background(watch, after=0.1)
    worker.work(burst=True)
    assert peak[0] == 1


def test_heartbeats_of_every_run_go_in_one_round_trip(
    conn: redis.Redis, context: WorkerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        enqueue(conn, threads_jobs.who, 1.5)
    worker = make_worker(conn, context, concurrency=3)
    beats: list[int] = []

    def beat() -> None:
        sent = [0]
        real = conn.pipeline

        def counting(*args: object, **kwargs: object) -> object:
            sent[0] += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(worker.connection, "pipeline", counting)
        before = {k: conn.ttl(k) for k in conn.keys("rq:execution:*")}
        worker.heartbeat_all()
        monkeypatch.undo()
        beats.append(sent[0])
        beats.append(len(before))

    in_background(beat, after=0.7)
    worker.work(burst=True)
    assert beats == [1, 3]


def test_a_stop_aborts_the_run_at_once(conn: redis.Redis, context: WorkerContext) -> None:
    job_id = enqueue(conn, threads_jobs.wait_for_abort, 30)
    other = enqueue(conn, threads_jobs.who, 1.0)
    worker = make_worker(conn, context, concurrency=2)
    in_background(lambda: send_stop_job_command(conn, job_id, serializer=JSONSerializer), after=0.6)
    started = time.monotonic()
    worker.work(burst=True)
    assert time.monotonic() - started < 5
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    stopped, untouched = queue.fetch_job(job_id), queue.fetch_job(other)
    assert stopped is not None and stopped.return_value() == "aborted"
    assert untouched is not None and untouched.get_status() is JobStatus.FINISHED


def test_a_run_that_outlives_its_stop_is_fenced_and_the_process_drains(
    conn: redis.Redis, context: WorkerContext
) -> None:
    stuck = enqueue(conn, threads_jobs.ignore_abort, 20)
    worker = make_worker(conn, context, concurrency=2, stop_grace=0.5)
    in_background(lambda: send_stop_job_command(conn, stuck, serializer=JSONSerializer), after=0.6)
    in_background(lambda: enqueue(conn, threads_jobs.who, 0.1), after=2.0)  # after the fence
    started = time.monotonic()
    worker.work()
    assert time.monotonic() - started < 5
    assert "did not end after its stop" in worker.recycle_reason
    job = Queue(QUEUE, connection=conn, serializer=JSONSerializer).fetch_job(stuck)
    assert job is not None and job.get_status() is JobStatus.STOPPED
    assert conn.scard(worker.executions_key) == 0
    assert StartedJobRegistry(QUEUE, connection=conn).get_job_ids() == []
    assert Queue(QUEUE, connection=conn).count == 1  # the later job waits for another process


def test_max_runs_recycles_the_process_gracefully(
    conn: redis.Redis, context: WorkerContext
) -> None:
    ids = [enqueue(conn, threads_jobs.who, 0.3) for _ in range(5)]
    worker = make_worker(conn, context, concurrency=2, max_runs=2)
    worker.work()
    assert worker.recycle_reason == "2 runs started (max 2)"
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    statuses = [queue.fetch_job(i).get_status() for i in ids]  # type: ignore[union-attr]
    assert statuses.count(JobStatus.FINISHED) == 2
    assert queue.count == 3  # left for the next process, none lost


def test_a_job_is_dequeued_through_the_intermediate_list(
    conn: redis.Redis, context: WorkerContext
) -> None:
    enqueue(conn, threads_jobs.who, 0.5)
    worker = make_worker(conn, context, concurrency=1)
    queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    worker.work(burst=True)
    assert conn.llen(queue.intermediate_queue_key) == 0  # moved there, removed at start


def test_fair_slots_serve_waiters_in_turn() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    assert slots.acquire(timeout=0.1)
    waiter = threading.Thread(target=lambda: order.append("b" if slots.acquire(5) else "-"))
    waiter.start()
    time.sleep(0.1)
    slots.release()  # handed to the waiter, not kept for whoever asks next
    assert not slots.acquire(timeout=0.1)
    waiter.join(5)
    assert order == ["b"]
    slots.release()
    assert slots.acquire(timeout=0.1)


def test_with_fewer_slots_than_queues_both_queues_are_served(
    conn: redis.Redis, context: WorkerContext
) -> None:
    first = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
    second = Queue(QUEUE + "-2", connection=conn, serializer=JSONSerializer)
    jobs = [second.enqueue(threads_jobs.who, 0.1), first.enqueue(threads_jobs.who, 0.1)]
    worker = ThreadsWorker(
        [first, second], context=context, concurrency=1, stop_grace=5.0,
        connection=conn, serializer=JSONSerializer,
    )  # fmt: skip
    in_background(lambda: second.enqueue(threads_jobs.who, 0.1), after=1.5)
    stopper = in_background(lambda: worker._no_more.set(), after=4.0)
    worker.work()
    stopper.join()
    assert all(j.get_status(refresh=True) is JobStatus.FINISHED for j in jobs)
    assert second.count == 0  # the one pushed while the first queue held the slot ran too


def test_more_runs_than_redis_py_s_default_pool_share_the_processs_pool(redis_url: str) -> None:
    """redis-py bounds a pool at 100 connections and raises past it: the threads pool's
    one pool (the runs' and RQ's) is sized to its concurrency."""
    settings = Settings(redis_url=redis_url, workers={"pool": "threads", "concurrency": 130})  # type: ignore[arg-type]
    context = WorkerContext.build(settings)
    conn = context.deps.redis
    # redis-py's default bound (100) failed runs with MaxConnectionsError when 200 ended
    # at once in one process (`fanbot bench compare`, the PSS slope phase).
    assert conn.connection_pool.max_connections >= 130 * 3
    try:
        conn.flushdb()
        ids = [enqueue(conn, threads_jobs.hold_redis, 2) for _ in range(130)]
        worker = make_worker(conn, context, concurrency=130)
        worker.work(burst=True)
        queue = Queue(QUEUE, connection=conn, serializer=JSONSerializer)
        statuses = [queue.fetch_job(i).get_status() for i in ids]  # type: ignore[union-attr]
        assert statuses.count(JobStatus.FINISHED) == 130, statuses
    finally:
        context.close()
