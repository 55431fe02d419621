"""One test per assumption about RQ's layout that :mod:`bot.store.rq_layout` lists, against
the tests' private redis-server, so an RQ upgrade that breaks one fails here first."""

from __future__ import annotations

import os
import socket
import time

import pytest
import redis
from rq import Queue, SimpleWorker, Worker, get_current_job
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimit
from rq.serializers import JSONSerializer
from rq.utils import now, utcformat

from bot.store import as_text
from bot.store.rq_layout import (
    HELD_STATUS,
    JOB_PREFIX,
    QUEUES_KEY,
    RQ_LUA,
    RqLayout,
    job_fields,
)

RAN = "test:rq-layout:ran"


def note_run(tag: str) -> str:
    """The job these tests enqueue: records that it ran."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(RAN, tag)
    return tag


@pytest.fixture
def conn(rconn: redis.Redis) -> redis.Redis:
    return rconn


def queue(conn: redis.Redis, name: str = "q") -> Queue:
    return Queue(name, connection=conn, serializer=JSONSerializer)


def held_job(conn: redis.Redis, tag: str, *, resumes: str = "") -> Job:
    """A job saved held the way the fair line saves it: ``HSET`` of :func:`job_fields`."""
    q = queue(conn)
    job = q.create_job(note_run, args=(tag,), status=JobStatus(HELD_STATUS))
    job.origin = q.name
    conn.eval(RQ_LUA + "rq_save(KEYS[1], ARGV, 1)", 1, job.key, *job_fields(job, resumes=resumes))
    return job


def enqueue_by_script(conn: redis.Redis, job: Job) -> None:
    script = RQ_LUA + "rq_enqueue(KEYS[1], ARGV[1], ARGV[2]) rq_register_queue(KEYS[2], KEYS[1])"
    conn.eval(script, 2, queue(conn).key, QUEUES_KEY, job.id, utcformat(now()))


def run_all(conn: redis.Redis) -> list[str]:
    SimpleWorker([queue(conn)], connection=conn, serializer=JSONSerializer).work(burst=True)
    return [as_text(t) for t in conn.lrange(RAN, 0, -1)]


def test_1_a_job_is_a_hash_that_hset_of_its_dict_saves(conn: redis.Redis) -> None:
    job = held_job(conn, "one")
    assert Job.key_for(job.id) == job.key == JOB_PREFIX + job.id
    fetched = Job.fetch(job.id, connection=conn, serializer=JSONSerializer)
    assert (fetched.func_name, list(fetched.args), fetched.origin) == (job.func_name, ["one"], "q")
    assert as_text(conn.hget(job.key, "status")) == fetched.get_status(refresh=False).value


def test_2_a_field_of_fanbots_own_survives_rqs_writes(conn: redis.Redis) -> None:
    job = held_job(conn, "two", resumes="run-1")
    layout = RqLayout(redis=conn)
    assert layout.run_of(job.id) == "run-1"
    fetched = Job.fetch(job.id, connection=conn, serializer=JSONSerializer)
    fetched.set_status(JobStatus.STARTED)
    fetched.save()
    assert layout.run_of(job.id) == "run-1"
    assert layout.run_of(held_job(conn, "own").id) != "run-1"  # its own id when unset


def test_3_a_held_job_in_no_queue_is_left_alone(conn: redis.Redis) -> None:
    job = held_job(conn, "three")
    assert JobStatus.RATE_LIMITED.value == HELD_STATUS
    assert run_all(conn) == []
    fetched = Job.fetch(job.id, connection=conn, serializer=JSONSerializer)
    assert fetched.get_status() == JobStatus.RATE_LIMITED


def test_4_rpush_sadd_and_queued_status_enqueue_a_job(conn: redis.Redis) -> None:
    job = held_job(conn, "four")
    enqueue_by_script(conn, job)
    assert queue(conn).get_job_ids() == [job.id]
    assert queue(conn).key in [q.key for q in Queue.all(connection=conn)]
    assert run_all(conn) == ["four"]
    assert Job.fetch(job.id, connection=conn).get_status() == JobStatus.FINISHED


def test_5_concurrency_lanes_name_free_and_pass_on_their_slots(conn: redis.Redis) -> None:
    first = queue(conn).enqueue(note_run, "a", rate_limit=RateLimit("lane", 1))
    second = queue(conn).enqueue(note_run, "b", rate_limit=RateLimit("lane", 1))
    layout = RqLayout(redis=conn)
    (lane,) = [lane for lane in layout.lanes() if lane.key == "lane"]
    assert lane.get_allowed_job_ids() == [first.id]
    assert second.get_status() == JobStatus.RATE_LIMITED
    first.cancel()
    layout.release_lane_slot("lane", first.id)
    assert lane.get_allowed_job_ids() == [second.id]
    assert second.get_status() == JobStatus.QUEUED
    assert run_all(conn) == ["b"]
    lane.cleanup()
    assert [x for x in layout.lanes() if x.key == "lane"] == []


def test_6_executions_sit_in_the_started_registry_by_heartbeat_deadline(
    conn: redis.Redis,
) -> None:
    job = queue(conn).enqueue(note_run, "six")
    with conn.pipeline() as pipe:
        execution = Execution.create(job, ttl=60, pipeline=pipe, worker_name="w")
        pipe.execute()
    assert ExecutionRegistry(job.id, conn).get_execution_ids() == [execution.id]
    deadline = conn.zscore(job.started_job_registry.key, execution.composite_key)
    assert deadline is not None and deadline > time.time()
    conn.delete(execution.key)  # its hash expired with its heartbeat TTL
    with pytest.raises(ValueError):
        Execution.fetch(execution.id, job.id, conn)
    job.set_status(JobStatus.STARTED)
    RqLayout(redis=conn).abandon_started("q", now=deadline + 1)
    assert job.get_status() == JobStatus.FAILED


def test_7_a_worker_is_a_hash_with_pid_hostname_and_death(conn: redis.Redis) -> None:
    worker = Worker([queue(conn)], connection=conn, name="layout-test")
    worker.register_birth()
    data = conn.hgetall(Worker.redis_worker_namespace_prefix + worker.name)
    assert int(data[b"pid"]) == os.getpid() and as_text(data[b"hostname"]) == socket.gethostname()
    layout = RqLayout(redis=conn)
    assert layout.worker_alive(worker.name)
    job = queue(conn).enqueue(note_run, "seven")
    with conn.pipeline() as pipe:  # what the worker writes as it takes the job
        Execution.create(job, ttl=60, pipeline=pipe, worker_name=worker.name)
        pipe.execute()
    current = layout.current_job(pid=os.getpid(), host=socket.gethostname())
    assert current is not None and current.id == job.id
    worker.register_death()
    assert not layout.worker_alive(worker.name)


def test_8_a_lost_job_goes_back_to_the_head_of_its_queue(conn: redis.Redis) -> None:
    q = queue(conn)
    lost = q.enqueue(note_run, "lost")
    other = q.enqueue(note_run, "other")
    assert conn.lmove(q.key, q.intermediate_queue_key) == lost.id.encode()
    assert isinstance(q.intermediate_queue.get_first_seen_key(lost.id), str)
    assert RqLayout(redis=conn).requeue_lost(lost.id)
    assert q.get_job_ids() == [lost.id, other.id]
    assert conn.llen(q.intermediate_queue_key) == 0
