"""The observing half of a job entry point: scope, span and metrics around one job.

``workers.jobs`` wraps each job in :func:`job_scope`: log lines inside carry the run id and
session key, the job's span continues the trace its payload or run record carries, the
time it waited in its queue is recorded, and every model call it makes reports its tokens
and cost (and, in a run, the first one its first token) to the cluster's metrics.
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
from bot.store.metrics import Update
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
    # The queue wait goes out with the job's first model metrics (or at its end), so the
    # first model request does not wait for one more round trip.
    pending = catalog.queue_wait(queue, time.time() - enqueued_at) if enqueued_at else []
    attrs = {"fanbot.session_key": session_key, "fanbot.queue": queue}
    if run_id:
        attrs["fanbot.run_id"] = run_id
    try:
        with (
            tracing.span("run" if run_id else "turn", attrs, parent=traceparent),
            bound(
                run_id=run_id,
                session_key=session_key,
                on_model_call=lambda model, usage, ok: _model_called(
                    deps, model, usage, ok, pending
                ),
                on_first_token=_first_token(deps, run, pending) if run is not None else None,
            ),
        ):
            yield
    finally:
        if pending:
            record.write(deps, _taken(pending))
        tracing.flush()  # RQ ends the horse with os._exit: buffered spans would be lost


def _taken(pending: list[Update]) -> list[Update]:
    taken = list(pending)
    pending.clear()
    return taken


def _model_called(deps: Deps, model: str, usage: Usage, ok: bool, pending: list[Update]) -> None:
    cost = estimate_cost(model, usage, deps.settings.prices) if usage.total else None
    record.write(deps, [*_taken(pending), *catalog.model_call(model, usage, cost, ok=ok)])


def _first_token(deps: Deps, run: RunRecord, pending: list[Update]) -> Callable[[], None]:
    seen = [False]

    def first() -> None:
        if not seen[0]:
            seen[0] = True
            waited = catalog.first_token(run.subagent_type, time.time() - run.created_at)
            record.write(deps, [*_taken(pending), *waited])

    return first
