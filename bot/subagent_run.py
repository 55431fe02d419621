"""One subagent run, from ``queued`` to its terminal transition (runs inside the RQ horse).

Fresh context: the type's system prompt plus the task as the only user message. Between
steps the run checks its stop flag and soft deadline and takes steering messages from its
inbox. A heartbeat thread proves to the reaper that the process is alive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from rq.timeouts import BaseTimeoutException

from bot.agent.context import ToolContext
from bot.agent.loop import LoopControl, LoopResult, Meter, run_loop
from bot.agent.subagent_types import subagent_types, tools_for_type
from bot.deps import Deps
from bot.errors import RunDeadline, RunStopped
from bot.finalize import finalize_run
from bot.followup import continuation
from bot.store.streams import ProgressEvent, put_progress
from bot.types import RunRecord, RunStatus

log = logging.getLogger(__name__)

PROGRESS_MIN_INTERVAL = 1.0


@contextmanager
def heartbeat(deps: Deps, run_id: str) -> Iterator[None]:
    """Refresh the run's heartbeat from a daemon thread while the body runs."""
    stop = threading.Event()
    every = deps.settings.subagents.heartbeat_seconds
    ttl = deps.settings.subagents.stale_after_seconds

    def beat() -> None:
        while not stop.wait(every):
            try:
                deps.runs.beat(run_id, ttl=ttl)
            except Exception:  # a Redis blip must not kill the run; the next beat retries
                log.warning("heartbeat for %s failed", run_id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"heartbeat-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 1)


def execute_run(deps: Deps, run_id: str) -> str:
    """Run ``run_id`` to its end; returns its final status (also recorded in Redis)."""
    record = deps.runs.get(run_id)
    if record is None:
        log.warning("run %s has no record; nothing to do", run_id)
        return "missing"
    ttl = deps.settings.subagents.stale_after_seconds
    if not deps.runs.mark_running(run_id, heartbeat_ttl=ttl):
        return record.status.value
    meter = Meter()
    start = ProgressEvent(run_id=run_id, thread=record.thread, text="started")
    put_progress(deps.redis, deps.keys, start)
    with heartbeat(deps, run_id):
        status, text, notes = _drive(deps, record, meter)
    finalize_run(deps, run_id, status=status, result=text, notes=notes, usage=meter.usage)
    return status.value


def _drive(deps: Deps, record: RunRecord, meter: Meter) -> tuple[RunStatus, str, str]:
    def steps() -> str:
        return f"after {meter.steps} step(s)"

    try:
        result = _loop(deps, record, meter)
    except RunStopped:
        return RunStatus.STOPPED, meter.last_text, f"stopped on request {steps()}"
    except RunDeadline:
        return RunStatus.TIMEOUT, meter.last_text, _timeout_note(record, steps())
    except BaseTimeoutException:
        finalize_run(
            deps,
            record.run_id,
            status=RunStatus.TIMEOUT,
            result=meter.last_text,
            notes=_timeout_note(record, steps()) + " (hard limit)",
            usage=meter.usage,
        )
        raise
    except openai.APITimeoutError as exc:
        if time.monotonic() - meter.started >= record.timeout_s:
            return RunStatus.TIMEOUT, meter.last_text, _timeout_note(record, steps())
        return RunStatus.ERROR, meter.last_text, f"model call timed out: {exc}"
    except openai.APIError as exc:
        return RunStatus.ERROR, meter.last_text, f"model call failed {steps()}: {_api_error(exc)}"
    except Exception as exc:
        log.exception("run %s crashed", record.run_id)
        return RunStatus.ERROR, meter.last_text, f"{type(exc).__name__}: {exc}"
    if not result.complete:
        note = f"step limit ({deps.settings.openai.max_steps}) reached; result is partial"
        return RunStatus.SUCCESS, result.text, note
    return RunStatus.SUCCESS, result.text, ""


def _timeout_note(record: RunRecord, steps: str) -> str:
    return f"run timeout of {record.timeout_s}s reached {steps}"


def _api_error(exc: openai.APIError) -> str:
    status = getattr(exc, "status_code", None)
    text = str(exc.message if hasattr(exc, "message") else exc)[:300]
    return f"HTTP {status}: {text}" if status else text


def _loop(deps: Deps, record: RunRecord, meter: Meter) -> LoopResult:
    sub_type = subagent_types(deps.settings)[record.subagent_type]
    system = (
        sub_type.system_prompt or subagent_types(deps.settings)["general-purpose"].system_prompt
    )
    prior = deps.transcripts.read(record.session_id)
    messages: list[dict[str, Any]] = (
        continuation(prior, record.task)  # a follow-up: the child session goes on
        if prior
        else [{"role": "system", "content": system}, {"role": "user", "content": record.task}]
    )
    for message in messages[-1:] if prior else messages:
        deps.transcripts.append(record.session_id, message)
    ctx = ToolContext(
        deps=deps,
        session_key=record.child_session_key,
        thread=record.thread,
        requester=record.requester,
        agent_id=record.agent_id,
        run_id=record.run_id,
    )
    return run_loop(
        model=deps.model,
        model_name=record.model,
        messages=messages,
        tools=tools_for_type(sub_type, deps.settings),
        ctx=ctx,
        max_steps=deps.settings.openai.max_steps,
        meter=meter,
        control=_control(deps, record, meter),
        thinking=record.thinking,
        max_tool_chars=deps.settings.subagents.max_result_chars,
    )


def _control(deps: Deps, record: RunRecord, meter: Meter) -> LoopControl:
    run_id = record.run_id
    last = [0.0]

    def checkpoint() -> None:
        if deps.runs.stop_requested(run_id):
            raise RunStopped("stop requested")
        if time.monotonic() - meter.started >= record.timeout_s:
            raise RunDeadline("soft deadline")

    def progress(text: str) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_MIN_INTERVAL:
            return
        last[0] = now
        deps.runs.update(run_id, result=meter.last_text, **_usage(meter))
        event = ProgressEvent(run_id=run_id, thread=record.thread, text=text)
        put_progress(deps.redis, deps.keys, event)

    return LoopControl(
        checkpoint=checkpoint,
        steering=lambda: deps.runs.drain_inbox(run_id),
        record=lambda m: deps.transcripts.append(record.session_id, m),
        progress=progress,
        deadline=meter.started + record.timeout_s,
    )


def _usage(meter: Meter) -> dict[str, int]:
    return {
        "prompt_tokens": meter.usage.prompt_tokens,
        "completion_tokens": meter.usage.completion_tokens,
    }
