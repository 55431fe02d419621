"""RQ job entry points. Each takes and returns JSON-able data.

A job gets what it needs from the :class:`~workers.context.WorkerContext` its worker
serves it (:func:`workers.context.current`). The launcher builds that context once
(:func:`warm_up`), before it forks its workers, so every forked work horse
inherits ready dependencies: the stores and the model client (whose TLS set-up alone
costs a few hundred milliseconds per job otherwise). A job run outside a fanbot worker
builds its own.

It also does once what every run would do first (openai's lazy chat resources, the price
table, the sandbox probe, the tools' schemas), then ``gc.freeze()``: a horse's collections
then skip what it inherited, so they neither take the time to walk it nor copy its pages
(measured with ``fanbot bench compare``: PSS per running subagent, spawn -> first request).
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import openai
from rq import get_current_job

from bot.agent.compiled import CompiledBody, preload
from bot.agent.llm import OpenAIChatModel, fold_stream
from bot.agent.router import ModelRouter
from bot.agent.subagent import SubagentBody
from bot.agent.subagent_types import GENERAL_PURPOSE, subagent_types, tools_for_type
from bot.agent.tools.sandbox import sandbox_status
from bot.agent.turn import execute_turn
from bot.config import Settings, load_settings
from bot.observe import tracing
from bot.observe.job_observer import job_scope
from bot.prices import table_cost
from bot.runs.execute import execute_run, start_run
from bot.steps import LoopControl, LoopResult, Meter, RunBody
from bot.store.jobs import SUBAGENTS_QUEUE, TURNS_QUEUE, TurnJob
from bot.types import RunRecord
from workers.context import WorkerContext, current

log = logging.getLogger(__name__)


def warm_up(settings: Settings, *, trace: bool = True) -> WorkerContext:
    """Build the worker's context once, before any horse forks (and import the compiled
    types' runnables, so horses inherit them). The launcher warms up before it forks its
    workers, with ``trace=False``: each worker starts tracing itself."""
    context = WorkerContext.build(settings)
    for problem in preload(settings):
        log.warning("%s; its runs will end with an error", problem)
    if trace:
        tracing.configure(settings, service="worker")  # each horse flushes its spans at the end
    try:
        _prepare(context)
    except Exception:  # never worth a worker that does not start: the horses do it instead
        log.warning("warm-up incomplete; each run builds what is missing", exc_info=True)
    gc.freeze()
    return context


def _prepare(w: WorkerContext) -> None:
    """What each run would otherwise build in its horse, built here once for all of them."""
    settings = w.deps.settings
    clients = w.model.warm() if isinstance(w.model, ModelRouter) else [w.model]
    for client in clients:
        if isinstance(client, OpenAIChatModel):
            _ = client.client.chat.completions  # openai imports these, ~27 pydantic classes, lazily
    "localhost".encode("idna")  # httpx's first URL imports the codec
    sandbox_status(settings.sandbox)  # a bwrap probe, cached per process
    for sub_type in subagent_types(settings).values():
        for tool in tools_for_type(sub_type, settings, mcp=w.mcp):
            tool.schema()
        # Loads the price table (30 ms, 150 ms in a busy horse) and caches the model's entry.
        table_cost(sub_type.model or settings.openai.model, prompt_tokens=1, completion_tokens=1)
    table_cost(settings.openai.model, prompt_tokens=1, completion_tokens=1)
    general = tools_for_type(GENERAL_PURPOSE, settings, mcp=w.mcp)
    _rehearse(tools=[t.schema() for t in general][:1])


_CHUNK = {"id": "warm", "object": "chat.completion.chunk", "created": 0, "model": "warm"}
_CANNED = [
    {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c",
        "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
]  # fmt: skip


def _rehearse(*, tools: list[dict[str, Any]]) -> None:
    """One streamed completion from a canned in-memory answer: openai builds its request
    transforms and rebuilds its response models (pydantic) on first use, per process."""
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in _CANNED) + "data: [DONE]\n\n"

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    with openai.OpenAI(base_url="http://warm-up.invalid/v1", api_key="-", http_client=http) as c:
        request: dict[str, Any] = {"model": "warm", "messages": [{"role": "user", "content": "hi"}]}
        request |= {"tools": tools, "stream": True, "stream_options": {"include_usage": True}}
        stream = c.chat.completions.create(**request)
        fold_stream(stream, limit=100)


@contextmanager
def _worked() -> Iterator[WorkerContext]:
    served = current()
    if served is not None:
        yield served  # a forked copy in this horse; redis-py reconnects after fork
        return
    built = WorkerContext.build(load_settings())
    try:
        yield built
    finally:
        built.close()


def run_turn(payload: dict[str, Any]) -> dict[str, Any]:
    """Main-agent turn for one inbound message (queue ``turns``)."""
    job = TurnJob.model_validate(payload)
    with _worked() as w, job_scope(w.deps, **_turn_scope(job)):
        text = execute_turn(w.deps, w.model, job, mcp=w.mcp, job_id=_job_id())
    return {"session_key": job.session_key, "chars": len(text)}


def run_subagent(run_id: str) -> dict[str, Any]:
    """One subagent run (queue ``subagents``); the run hash holds the truth."""
    with _worked() as w:
        start = start_run(w.deps, run_id, job_id=run_id)  # the scope reuses what it read
        with job_scope(w.deps, queue=SUBAGENTS_QUEUE, run_id=run_id, run=start.record):
            status = execute_run(w.deps, run_id, _body(w), start=start)
    return {"run_id": run_id, "status": status}


def resume_subagent(run_id: str, join_id: str, approval_id: str = "") -> dict[str, Any]:
    """A parked run goes on (queue ``subagents``): an orchestrator once its children ended
    (``join_id``), or a run whose tool call a person decided (``approval_id``)."""
    with _worked() as w, job_scope(w.deps, queue=SUBAGENTS_QUEUE, run_id=run_id):
        if approval_id:
            body = SubagentBody(deps=w.deps, model=w.model, mcp=w.mcp, resume_approval=approval_id)
        elif not w.deps.joins.start(join_id):  # /stop cancelled it, or it already resumed
            return {"run_id": run_id, "status": "not resumed"}
        else:
            body = SubagentBody(deps=w.deps, model=w.model, mcp=w.mcp, resume_join=join_id)
        start = start_run(w.deps, run_id, resume=True, job_id=_job_id())
        status = execute_run(w.deps, run_id, body, start=start)
    return {"run_id": run_id, "status": status}


def recover_subagent(run_id: str) -> dict[str, Any]:
    """The next attempt at a run whose worker was lost (queue ``subagents``; queued by
    :func:`bot.runs.recover.recover_run`): it goes on from the run's last completed step."""
    with _worked() as w:
        start = start_run(w.deps, run_id, recover=True, job_id=_job_id())
        with job_scope(w.deps, queue=SUBAGENTS_QUEUE, run_id=run_id, run=start.record):
            status = execute_run(w.deps, run_id, _body(w, recovered=True), start=start)
    return {"run_id": run_id, "status": status}


def _job_id() -> str:
    job = get_current_job()
    return "" if job is None else str(job.id)


def _turn_scope(job: TurnJob) -> dict[str, Any]:
    current = get_current_job()
    created = current.created_at if current is not None else None
    return {
        "queue": TURNS_QUEUE,
        "session_key": job.session_key,
        "traceparent": job.traceparent,
        "enqueued_at": created.timestamp() if created is not None else None,
    }


def _body(w: WorkerContext, *, recovered: bool = False) -> RunBody:
    """The run's body by its type: a compiled type's runnable (``recovered``: from its
    beginning again), else the model's tool loop (``recovered``: from its last step)."""

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        sub_type = subagent_types(w.deps.settings).get(record.subagent_type)
        chosen: RunBody = (
            CompiledBody(deps=w.deps)
            if sub_type is not None and sub_type.runnable
            else SubagentBody(deps=w.deps, model=w.model, mcp=w.mcp, recovered=recovered)
        )
        return chosen(record, control=control, meter=meter)

    return body
