"""Compiled subagent types run through the real run lifecycle (``execute_run``) on Redis:
every accepted runnable shape, the contract's error, and stop and timeouts on a runnable
that never yields."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from bot.agent.compiled import CompiledBody, preload
from bot.config import Settings
from bot.deps import Deps
from bot.runs.execute import execute_run
from bot.types import RunContext, RunRecord, RunStatus
from tests import compiled_runnables
from tests.integration.test_finalize import make_run

SHAPES = {
    "echo": "echo: the task",
    "aecho": "async echo: the task",
    "steps": "done after steps: thinking 2",
    "asteps": "async done",
    "only_answer": "just the answer",
    "invoker": "invoked",
    "ainvoker": "ainvoked",
    "langchain_messages": "from langchain",
}


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    types = [
        {"name": name, "runnable": f"tests.compiled_runnables:{name}"}
        for name in [*SHAPES, "no_messages", "boom", "hang", "ahang", "not_callable", "spin"]
    ]
    types.append({"name": "graph", "runnable": "tests.compiled_graph:graph"})
    types.append({"name": "gone", "runnable": "tests.compiled_runnables:missing_attr"})
    settings = Settings(redis_url=redis_url, subagent_types=types)  # type: ignore[arg-type]
    built = Deps.build(settings)
    compiled_runnables.RELEASE.clear()
    yield built
    compiled_runnables.RELEASE.set()
    built.close()


def run(deps: Deps, type_name: str, **fields: object) -> RunRecord:
    make_run(deps, "r1", subagent_type=type_name, task="the task", **fields)
    execute_run(deps, "r1", CompiledBody(deps=deps))
    record = deps.runs.get("r1")
    assert record is not None
    return record


@pytest.mark.parametrize(("type_name", "result"), SHAPES.items())
def test_each_runnable_shape_ends_success_with_its_last_message(
    deps: Deps, type_name: str, result: str
) -> None:
    record = run(deps, type_name)
    assert (record.status, record.result, record.notes) == (RunStatus.SUCCESS, result, "")
    transcript = deps.transcripts.read(record.session_id)
    assert transcript[0]["role"] == "user" and transcript[0]["content"] == "the task"
    assert transcript[-1]["content"] == result and transcript[-1]["role"] == "assistant"


def test_a_langgraph_graph_streams_its_states_and_counts_its_tokens(deps: Deps) -> None:
    record = run(deps, "graph")
    assert record.status is RunStatus.SUCCESS
    assert record.result == "summary: notes on the task"
    assert (record.prompt_tokens, record.completion_tokens) == (11, 5)
    contents = [m["content"] for m in deps.transcripts.read(record.session_id)]
    assert contents == ["the task", "notes on the task", "summary: notes on the task"]


@pytest.mark.parametrize(
    ("type_name", "notes"),
    [
        ("no_messages", "returned a mapping with keys ['answer'], without 'messages'"),
        ("boom", "raised ValueError: the runnable broke"),
        ("not_callable", "is a int, not callable"),
        ("gone", "cannot load runnable 'tests.compiled_runnables:missing_attr'"),
    ],
)
def test_a_broken_runnable_is_an_error_run_naming_the_contract(
    deps: Deps, type_name: str, notes: str
) -> None:
    record = run(deps, type_name)
    assert record.status is RunStatus.ERROR
    assert notes in record.notes
    if type_name in ("no_messages", "not_callable"):
        assert "receives {'messages': [...]}" in record.notes


@pytest.mark.parametrize("type_name", ["hang", "ahang"])
def test_stop_ends_a_runnable_that_never_yields(deps: Deps, type_name: str) -> None:
    threading.Timer(0.5, deps.runs.request_stop, args=("r1",)).start()
    started = time.monotonic()
    record = run(deps, type_name)
    assert record.status is RunStatus.STOPPED
    assert time.monotonic() - started < 5


def test_the_soft_deadline_ends_a_runnable_that_never_yields(deps: Deps) -> None:
    started = time.monotonic()
    record = run(deps, "hang", timeout_s=1)
    assert record.status is RunStatus.TIMEOUT
    assert "run timeout of 1s reached" in record.notes
    assert time.monotonic() - started < 5


def run_in_threads_pool(deps: Deps, type_name: str, *, stop_after: float) -> tuple[RunRecord, str]:
    """The run as the threads pool runs it: on a thread of its own, with its abort; the
    abort comes ``stop_after`` seconds in. Returns the record and the runnable's thread."""
    from bot.supervise.abort import Abort, running

    make_run(deps, "r1", subagent_type=type_name, task="the task")
    mine = Abort()
    threads: list[str] = []
    threading.Timer(stop_after, mine.abort, args=("stopped on request",)).start()

    def work() -> None:
        threads.append(threading.current_thread().name)
        with running(mine):
            execute_run(deps, "r1", CompiledBody(deps=deps))

    worker = threading.Thread(target=work, name="run-r1", daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the aborted run did not end"
    record = deps.runs.get("r1")
    assert record is not None
    return record, threads[0]


@pytest.mark.parametrize("type_name", ["spin", "echo", "aecho", "asteps"])
def test_in_the_threads_pool_a_runnable_runs_in_its_runs_thread_and_an_abort_ends_it(
    deps: Deps, type_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.agent import compiled

    started: list[str] = []

    opened = compiled.open_states

    def spy(*args: object, **kwargs: object) -> object:
        started.append(threading.current_thread().name)
        return opened(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compiled, "open_states", spy)
    record, thread = run_in_threads_pool(deps, type_name, stop_after=0.5)
    assert started == [thread]  # no thread of its own that could outlive the run
    if type_name == "spin":  # CPU-bound pure Python: interrupted in its own thread
        assert record.status is RunStatus.STOPPED
    else:
        assert record.status is RunStatus.SUCCESS
        assert record.result == SHAPES[type_name]


def test_a_forked_compiled_run_receives_the_requester_history(deps: Deps) -> None:
    session = "agent:main:console:c:thread:t"
    deps.history.append(
        session,
        {"role": "user", "content": "alice: we use postgres"},
        {"role": "assistant", "content": "noted"},
    )
    record = run(deps, "echo", context=RunContext.FORK)
    transcript = deps.transcripts.read(record.session_id)
    assert [m["content"] for m in transcript[:2]] == ["alice: we use postgres", "noted"]
    assert transcript[2]["content"].endswith("Your task:\nthe task")
    assert record.result.startswith("echo: The messages above")


def test_rqs_hard_timeout_interrupts_the_wait_for_a_runnable_that_never_yields(
    deps: Deps,
) -> None:
    from rq.timeouts import JobTimeoutException, UnixSignalDeathPenalty

    make_run(deps, "r1", subagent_type="hang", task="the task", timeout_s=600)
    started = time.monotonic()
    with (
        pytest.raises(JobTimeoutException),
        UnixSignalDeathPenalty(1, JobTimeoutException, job_id="r1"),
    ):
        execute_run(deps, "r1", CompiledBody(deps=deps))
    record = deps.runs.get("r1")
    assert record is not None and record.status is RunStatus.TIMEOUT
    assert "(hard limit)" in record.notes
    assert time.monotonic() - started < 5


def test_preload_imports_the_runnables_and_names_one_that_cannot_be_loaded(deps: Deps) -> None:
    [problem] = preload(deps.settings)
    assert problem.startswith("subagent type 'gone': cannot load runnable")
    assert "AttributeError" in problem
