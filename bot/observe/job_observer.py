"""The observing half of a job entry point: scope, span and metrics around one job.

``workers.jobs`` wraps each job in :func:`job_scope`: log lines inside carry the run id and
session key, the job's span continues the trace its payload or run record carries, the
time it waited in its queue is recorded, and every model call it makes reports its tokens
and cost (and, in a run, the first one its first token) to the cluster's metrics. The
updates are kept in the process (no round trip before the first model request) and
written by the run's finalize script, or when they are due, or at the job's end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from bot.deps import Deps
from bot.observe import metric_defs as catalog
from bot.observe import record, tracing
from bot.observe.scope import bound
from bot.prices import estimate_cost
from bot.types import RunRecord, Usage


@contextlib.contextmanager
def job_scope(
    deps: Deps,
    *,
    queue: str,
    run_id: str = "",
    session_key: str = "",
    traceparent: str = "",
    enqueued_at: float | None = None,
    run: RunRecord | None = None,
) -> Iterator[None]:
    """Observe one job of ``queue`` (a run's job when ``run_id`` is set; ``run``: its
    record when the caller has read it already)."""
    if run is None and run_id:
        run = deps.runs.get(run_id)
    if run is not None:
        session_key, traceparent = run.session_key, run.traceparent or traceparent
        enqueued_at = run.created_at
    if enqueued_at:
        record.write(deps, catalog.queue_wait(queue, time.time() - enqueued_at))
    attrs = {"fanbot.session_key": session_key, "fanbot.queue": queue}
    if run_id:
        attrs["fanbot.run_id"] = run_id
    try:
        with (
            tracing.span("run" if run_id else "turn", attrs, parent=traceparent),
            bound(
                run_id=run_id,
                session_key=session_key,
                on_model_call=lambda model, usage, ok: _model_called(deps, model, usage, ok),
                on_first_token=_first_token(deps, run) if run is not None else None,
            ),
        ):
            yield
    finally:
        record.flush(deps)  # a run's end carried most of them (its finalize script)
        tracing.flush()  # RQ ends the horse with os._exit: buffered spans would be lost


def _model_called(deps: Deps, model: str, usage: Usage, ok: bool) -> None:
    cost = estimate_cost(deps.settings, model, usage) if usage.total else None
    label = catalog.model_label(model, catalog.configured_models(deps.settings))
    record.write(deps, catalog.model_call(label, usage, cost, ok=ok))


def _first_token(deps: Deps, run: RunRecord) -> Callable[[], None]:
    seen = [False]

    def first() -> None:
        if not seen[0]:
            seen[0] = True
            waited = catalog.first_token(run.subagent_type, time.time() - run.created_at)
            record.write(deps, waited)

    return first
