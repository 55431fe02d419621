"""One subagent run, from ``queued`` to its terminal transition (runs inside the RQ horse).

The lifecycle is here; the work is a :class:`RunBody` (the agent's tool loop, see
:mod:`bot.agent.subagent`) that the worker passes in. Between steps the body calls the
hooks this module gives it: the stop flag and soft deadline, steering messages from the
run's inbox, the transcript, and progress. The stall watchdog's thread
(:mod:`bot.runs.stall`) also refreshes the heartbeat that proves to the reaper that the
process is alive. Whatever ends the body (an answer, a stop, a deadline, a model failure,
RQ's hard timeout, a crash) ends in exactly one :func:`~bot.runs.finalize.finalize_run`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from rq.timeouts import BaseTimeoutException, JobTimeoutException

from bot.deps import Deps
from bot.errors import (
    BudgetExceeded,
    HookFailed,
    ModelCallFailed,
    RunDeadline,
    RunFailed,
    RunParked,
    RunStalled,
    RunStopped,
)
from bot.hooks.chain import run_hooks
from bot.runs.approval_gate import post_request
from bot.runs.budget import run_guard
from bot.runs.finalize import finalize_run
from bot.runs.line import after_slot_freed
from bot.runs.outfiles import out_snapshot
from bot.runs.progress_lines import save_tool_count, show_waiting, step_event
from bot.runs.recover import resumed_line
from bot.runs.stall import stall_watch
from bot.runs.steer_receipts import read_inbox
from bot.steps import LoopControl, Message, Meter, RunBody
from bot.store.progress import ProgressEvent
from bot.store.runs import TOOLS_FIELD, RunStart
from bot.supervise import abort
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)

PROGRESS_MIN_INTERVAL = 1.0


def start_run(
    deps: Deps, run_id: str, *, resume: bool = False, recover: bool = False, job_id: str = ""
) -> RunStart:
    """Job ``job_id`` starts executing ``run_id`` (``resume``: a parked run goes on;
    ``recover``: the next attempt after its worker was lost) in one round trip: marked
    running with a first heartbeat, ``out/`` remembered (not again by a later attempt),
    "started" on its status card; also reads the run, its stop flag and its inbox's length
    for the first step."""
    return deps.runs.start(
        run_id,
        heartbeat_ttl=deps.settings.subagents.stale_after_seconds,
        resume=resume,
        recover=recover,
        job_id=job_id,
        snapshot=None if recover else out_snapshot(),
        progress="" if recover else "started",
    )


def execute_run(
    deps: Deps, run_id: str, body: RunBody, *, resume: bool = False, start: RunStart | None = None
) -> str:
    """Run ``run_id`` to its end; returns its final status (also recorded in Redis), or
    ``parked`` when an orchestrator waits for its children (``resume``: it is back).
    ``start``: :func:`start_run` done already by the caller."""
    start = start or start_run(deps, run_id, resume=resume)
    record = start.record
    if record is None:
        log.warning("run %s has no record; nothing to do", run_id)
        return "missing"
    if not start.started:
        return record.status.value
    meter = _meter(record, start)
    current = abort.current()
    if current is not None:  # threads pool: see workers/threaded.py
        current.deadline = record.deadline_after(meter.started)  # None: no deadline
        current.deadline_reason = _timeout_note(record, "(it did not end there)")
        current.partial = lambda: {
            "result": meter.last_text or None,
            "usage": meter.usage,
            "tools": meter.tool_calls,
            **_fallback_fields(meter),
        }
    deps.failpoints.hit("run.before_first_step")
    with stall_watch(deps, record, meter) as watch:
        try:
            status, text, notes = _drive(deps, record, watch.guard(body), meter, start)
        except RunParked as parked:
            if watch.superseded:
                return SUPERSEDED
            _park(deps, record, meter, parked)
            return "parked"
        status, text, notes = _at_end(deps, record, meter, status, text, notes)
        # The watch stops now; its thread is joined once the announce is written (the
        # finalize script decides alone whether this call or the watch's ends the run).
        watch.done.set()
        if watch.superseded:
            return SUPERSEDED
        finalize_run(
            deps,
            run_id,
            status=status,
            result=text,
            notes=notes,
            usage=meter.usage,
            tools=meter.tool_calls,
            executor=record.executor,
            **_fallback_fields(meter),
        )
    return status.value


SUPERSEDED = "superseded"
"""What a job returns whose run went on in a later attempt (it was taken for lost)."""


def _meter(record: RunRecord, start: RunStart) -> Meter:
    """The meter a run's job starts with: a resumed run goes on counting its tokens; the
    next attempt after a lost worker also keeps its tool count, its last text and its
    clock (the run's timeout counts from its first start), and its card says it was
    resumed while it works (a standing note: the recovery's own progress line is replaced
    by the next step's within the gateway's edit interval)."""
    if not record.resuming:
        meter = Meter(usage=record.usage)
        meter.answered(record.answered_by, record.fallback_reason)  # a parked run's
        return meter
    first = record.started_at or record.created_at
    return Meter(
        usage=record.usage,
        tool_calls=start.tools,
        last_text=record.result,
        started=time.monotonic() - max(0.0, time.time() - first),
        note=resumed_line(record.resumes),  # stays on its card
        answered_by=record.answered_by,
        fallback_reason=record.fallback_reason,
    )


def _fallback_fields(meter: Meter) -> dict[str, str]:
    """The run record's fields saying a fallback answered (none when none did)."""
    if not meter.answered_by:
        return {}
    return {"answered_by": meter.answered_by, "fallback_reason": meter.fallback_reason}


def _drive(
    deps: Deps, record: RunRecord, body: RunBody, meter: Meter, start: RunStart
) -> tuple[RunStatus, str, str]:
    """Run the body and map how it ended to (status, result, notes)."""

    def steps() -> str:
        return f"after {meter.steps} step(s)"

    try:
        try:
            result = body(record, control=_control(deps, record, meter, start), meter=meter)
        except Exception as exc:
            # An aborted run (threads pool: its model call cut, its command killed) ends by
            # whatever that raised in it; it was stopped (or timed out), whatever that says.
            current = abort.current()
            if current is None or not current.aborted:
                raise
            if isinstance(exc, RunParked | BaseTimeoutException):
                raise
            if current.timed_out:
                raise JobTimeoutException(current.reason) from exc
            if current.past_deadline:
                raise RunDeadline("soft deadline") from exc
            raise RunStopped("stop requested") from exc
    except RunStopped:
        return RunStatus.STOPPED, meter.last_text, f"stopped on request {steps()}"
    except RunStalled as exc:
        return RunStatus.TIMEOUT, meter.last_text, f"{exc}, {steps()}"
    except BudgetExceeded as exc:
        return RunStatus.STOPPED, meter.last_text, f"{exc}; stopped {steps()}"
    except RunDeadline:
        return RunStatus.TIMEOUT, meter.last_text, _timeout_note(record, steps())
    except BaseTimeoutException:
        notes = _timeout_note(record, steps()) + " (hard limit)"
        finalize_run(
            deps,
            record.run_id,
            status=RunStatus.TIMEOUT,
            result=meter.last_text,
            notes=notes,
            usage=meter.usage,
            tools=meter.tool_calls,
            executor=record.executor,
            **_fallback_fields(meter),
        )
        raise
    except ModelCallFailed as exc:
        if exc.timed_out and record.past_deadline(time.monotonic() - meter.started):
            return RunStatus.TIMEOUT, meter.last_text, _timeout_note(record, steps())
        verb = "timed out" if exc.timed_out else f"failed {steps()}"
        return RunStatus.ERROR, meter.last_text, f"model call {verb}: {exc}"
    except RunFailed as exc:
        return RunStatus.ERROR, meter.last_text if exc.result is None else exc.result, str(exc)
    except RunParked:
        raise
    except Exception as exc:
        log.exception("run %s crashed", record.run_id)
        return RunStatus.ERROR, meter.last_text, f"{type(exc).__name__}: {exc}"
    if not result.complete:
        note = f"step limit ({deps.settings.openai.max_steps}) reached; result is partial"
        return RunStatus.SUCCESS, result.text, note
    return RunStatus.SUCCESS, result.text, ""


def _at_end(
    deps: Deps, record: RunRecord, meter: Meter, status: RunStatus, text: str, notes: str
) -> tuple[RunStatus, str, str]:
    """How the run ends once its hooks saw it (docs/hooks.md): they may change its result;
    one that raises makes it an error naming the hook. Slow hooks' lines join the notes."""
    hooks = run_hooks(deps.settings, record, report=meter.remarks.append)
    try:
        text = hooks.run_end(status=status.value, result=text, notes=notes)
    except HookFailed as exc:
        status, notes = RunStatus.ERROR, "\n".join(n for n in (notes, str(exc)) if n)
    return status, text, "\n".join(n for n in (notes, *meter.remarks) if n)


def _park(deps: Deps, record: RunRecord, meter: Meter, parked: RunParked) -> None:
    save_tool_count(deps, record.run_id, meter)
    deps.runs.park(
        record.run_id,
        rounds=parked.rounds,
        **_fallback_fields(meter),
        result=parked.text,
        **meter.usage.record_fields(),
        approval_id=parked.approval_id,
    )
    waiting = "waiting for approval" if parked.approval_id else "waiting for its subagents"
    event = ProgressEvent(run_id=record.run_id, thread=record.thread, text=waiting)
    deps.progress.put(event)
    # children or a person may take long: the slot goes to the next run meanwhile
    if deps.jobs.fair.release(record.run_id):
        after_slot_freed(deps)
    if parked.approval_id:
        post_request(deps, parked.approval_id)
    log.info("run %s parked (%s)", record.run_id, waiting)


def _timeout_note(record: RunRecord, steps: str) -> str:
    return f"run timeout of {record.timeout_s}s reached {steps}"


FIRST_STEP = ("checkpoint", "steering")
"""The hooks a tool loop's first step calls, in order, before its model request."""


@dataclass(kw_only=True)
class StartReadings:
    """The stop flag and inbox length the run's start read, moments before its first step.

    They stand for the first step's checkpoint and steering when the body calls those
    first, in that order (the tool loop does): two round trips fewer before the first model
    request. Any other hook call spends them, and each stands once.
    """

    stop: bool
    inbox: int
    used: int = 0
    spent: bool = False

    def take(self, hook: str) -> bool:
        """Whether this call of ``hook`` may use the start's reading."""
        if self.spent or hook != FIRST_STEP[self.used]:
            self.spent = True
            return False
        self.used += 1
        self.spent = self.used == len(FIRST_STEP)
        return True


def _control(deps: Deps, record: RunRecord, meter: Meter, start: RunStart) -> LoopControl:
    run_id = record.run_id
    last = [0.0]
    noted = [""]  # a new budget warning goes out at once, unthrottled
    counted = [0]
    early = StartReadings(stop=start.stop_requested, inbox=start.inbox)

    def stop_requested() -> bool:
        if early.take("checkpoint"):
            return early.stop
        return deps.runs.stop_requested(run_id)

    def steering() -> list[str]:
        if early.take("steering") and not early.inbox:
            return []
        return read_inbox(deps, run_id)

    def record_message(message: Message) -> None:
        early.take("record")
        if message.get("role") != "assistant":
            deps.transcripts.append(record.session_id, message)
            return
        # An answer is a completed step: its tokens are saved with it (one round trip), so
        # the attempt after a lost worker counts them (bot.agent.resume), and so is its
        # text, the partial result a stop from outside ends the run with (bot.runs.stop).
        text = message.get("content")
        said = {"result": text} if isinstance(text, str) and text.strip() else {}
        with deps.connection.batch(transaction=False) as pipe:
            deps.transcripts.extend(record.session_id, [message], pipe=pipe)
            deps.runs.update(
                run_id,
                client=pipe,
                **meter.usage.record_fields(),
                **said,
            )
            pipe.execute()

    def checkpoint() -> None:
        if abort.aborted() or stop_requested():
            raise RunStopped("stop requested")
        if record.past_deadline(time.monotonic() - meter.started):
            raise RunDeadline("soft deadline")

    def progress(text: str) -> None:
        early.take("progress")
        with deps.connection.batch(transaction=False) as pipe:  # one round trip (or none)
            if meter.tool_calls != counted[0]:  # unthrottled: a stop's final tally reads it
                counted[0] = meter.tool_calls
                deps.runs.update(run_id, client=pipe, **{TOOLS_FIELD: meter.tool_calls})
            now = time.monotonic()
            if now - last[0] >= PROGRESS_MIN_INTERVAL or meter.note != noted[0]:
                last[0], noted[0] = now, meter.note
                deps.runs.update(
                    run_id,
                    client=pipe,
                    result=meter.last_text,
                    **meter.usage.record_fields(),
                )
                deps.progress.put(step_event(record, meter, text), pipe=pipe)
            pipe.execute()

    return LoopControl(
        checkpoint=checkpoint,
        steering=steering,
        record=record_message,
        progress=progress,
        deadline=record.deadline_after(meter.started),
        budget=run_guard(deps, record, checkpoint),
        wait=lambda what: show_waiting(deps, run_id, what),
    )
