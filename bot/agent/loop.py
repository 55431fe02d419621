"""The tool loop: call the model, run the tools it asks for, repeat until it answers.

Between steps the loop asks its control for a checkpoint (stop flag, soft deadline) and for
steering messages (``/subagents send``). Usage accumulates in a :class:`Meter` the caller
owns, so the tokens spent survive any exception that ends the run.

The hooks ``ctx`` carries (docs/hooks.md) see each model call before and after, and each
tool call before (they may veto it) and after (they may change its result).

Sizes stay bounded: the model client keeps at most ``openai.max_reply_chars`` of a reply,
and each tool result is cut to ``max_tool_chars`` before the model or the transcript sees it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from bot.agent.compaction import Fitter, OnCompact, ThreadTooLong, too_long_text
from bot.agent.context import ToolContext
from bot.agent.tools import Tool, execute_tool
from bot.errors import RunDeadline, RunFailed
from bot.hooks.chain import NO_HOOKS, Hooks, Vetoed
from bot.models.completion import ChatModel, Completion, CompletionRequest, ToolCallRequest
from bot.models.errors import Failure, failure_kind
from bot.models.window import window_for
from bot.observe import tracing
from bot.runs.naming import Icon
from bot.steps import LoopControl, LoopResult, Message, Meter
from bot.text.untrusted import untrusted

log = logging.getLogger(__name__)

ARG_PREVIEW_CHARS = 40

__all__ = ["Gate", "LoopControl", "LoopResult", "Meter", "run_calls", "run_loop"]

Gate = Callable[[Sequence[ToolCallRequest]], None]
"""Asked before each tool call with it and the calls of the same step after it; raises
(:class:`~bot.errors.RunParked`) to stop the loop before the call runs (approvals)."""


def run_loop(
    *,
    model: ChatModel,
    model_name: str,
    messages: list[Message],
    tools: Sequence[Tool],
    ctx: ToolContext,
    max_steps: int,
    meter: Meter,
    control: LoopControl | None = None,
    thinking: str = "",
    max_tool_chars: int = 20_000,
    gate: Gate | None = None,
    on_compact: OnCompact | None = None,
) -> LoopResult:
    """Drive the model until it answers without tool calls or ``max_steps`` is reached.

    Each call is first fitted to the model's window, and a "context too long" refusal is
    compacted and retried (:mod:`bot.agent.compaction`); ``on_compact`` hears each summary.
    A thread that cannot be made to fit is answered plainly."""
    control = control or LoopControl()
    schemas = [t.schema() for t in tools]
    fail = _failpoint(ctx)
    hooks = _hooks(ctx)
    deps = getattr(ctx, "deps", None)
    fitter = Fitter(
        model=model,
        model_name=model_name,
        win=window_for(deps.settings if deps is not None else None, model_name),
        meter=meter,
        control=control,
        on_compact=on_compact,
    )

    def on_chunk() -> None:
        meter.touch("model output")
        fail("in_model_call")

    on_wait = _waiting(control, meter)

    for step in range(max_steps):
        if step:
            fail("between_steps")
        _before_step(control, messages)

        def request() -> CompletionRequest:
            meter.touch("model call sent")
            return CompletionRequest(
                model=model_name,
                messages=hooks.before_model(model_name, messages, schemas),
                tools=schemas,
                thinking=thinking,
                timeout=_time_left(control),
                budget=control.remaining(),
                on_chunk=on_chunk,
                on_wait=on_wait,
            )

        try:
            # fitted before the spend is reserved: a summarizing call reserves its own
            fitter.before_call(messages, schemas)
            _budget_warning(control, messages, meter, model_name, schemas)
            completion = _fitted_call(model, request, fitter, messages, schemas, control)
        except ThreadTooLong as exc:
            if ctx.run_id:  # a run fails, with what it had: its result is no answer
                raise RunFailed(
                    f"its conversation is too long for the model ({model_name}), even after "
                    "summarizing its older steps",
                    result=meter.last_text or None,
                ) from exc
            meter.last_text = too_long_text(model_name)
            return LoopResult(text=meter.last_text, complete=True)
        control.budget.after_call(
            model=completion.answered_by or model_name, usage=completion.usage
        )
        meter.answered(completion.answered_by, completion.fallback_reason)
        meter.usage += completion.usage
        meter.steps += 1
        completion = hooks.after_model(completion.answered_by or model_name, completion)
        if completion.cut_chars:
            log.warning(
                "reply of %s cut: %d characters past the limit", model_name, completion.cut_chars
            )
        _append(messages, completion.as_message(), control)
        if completion.content:
            meter.last_text = completion.content
        if not completion.tool_calls:  # no status of its own: the run's end is next
            return LoopResult(text=completion.content, complete=True)
        run_calls(
            completion.tool_calls,
            tools=tools,
            ctx=ctx,
            messages=messages,
            meter=meter,
            control=control,
            max_tool_chars=max_tool_chars,
            gate=gate,
        )
    return LoopResult(text=meter.last_text, complete=False)


REFUSALS_RETRIED = 2
"""A "context too long" refusal is compacted and retried, then trimmed harder and retried
once more; a third is answered plainly (docs/models.md)."""


def _fitted_call(
    model: ChatModel,
    request: Callable[[], CompletionRequest],
    fitter: Fitter,
    messages: list[Message],
    schemas: list[Message],
    control: LoopControl,
) -> Completion:
    """One model call; a "context too long" refusal fits the messages again and retries
    (raises :class:`ThreadTooLong` when nothing is left to take)."""
    name = fitter.model_name
    for attempt in range(REFUSALS_RETRIED + 1):
        try:
            return model.complete(request())
        except BaseException as exc:
            control.budget.after_call(model=name, usage=None)
            if not isinstance(exc, Exception) or failure_kind(exc) != Failure.CONTEXT_TOO_LONG:
                raise
            if attempt == REFUSALS_RETRIED:
                raise ThreadTooLong(name) from exc
            fitter.after_refusal(messages, schemas, attempt=attempt)
            control.budget.before_call(model=name, messages=messages, tools=schemas)
    raise AssertionError("unreachable: the last attempt returns or raises")


def run_calls(
    calls: Sequence[ToolCallRequest],
    *,
    tools: Sequence[Tool],
    ctx: ToolContext,
    messages: list[Message],
    meter: Meter,
    control: LoopControl,
    max_tool_chars: int,
    gate: Gate | None = None,
) -> None:
    """Run one step's tool calls in order, appending each result (a resumed run calls it
    with the calls left of its step)."""
    by_name = {t.name: t for t in tools}
    fail = _failpoint(ctx)
    hooks = _hooks(ctx)
    for index, asked in enumerate(calls):
        control.checkpoint()
        if gate is not None:
            gate(calls[index:])
        try:
            call = hooks.before_tool(asked)  # as the hooks leave its arguments
        except Vetoed as vetoed:  # never runs; the model reads why (docs/hooks.md)
            vetoed_result = {"role": "tool", "tool_call_id": asked.id, "content": str(vetoed)}
            _append(messages, vetoed_result, control)
            continue
        meter.tool_calls += 1
        control.progress(_status(meter, f"{Icon.TOOL} {call.name}{short_args(call.arguments)}"))
        meter.touch(f"tool {call.name} started", tool=call.name)
        fail(f"tool_started.{call.name}")
        result = _run_call(by_name, call, ctx, max_tool_chars)
        fail(f"tool_done.{call.name}")
        meter.touch(f"tool {call.name} finished", tool="")
        _append(messages, {"role": "tool", "tool_call_id": call.id, "content": result}, control)


def _failpoint(ctx: ToolContext) -> Callable[[str], None]:
    """Hits ``run.<point>`` in a subagent run, ``turn.<point>`` in a main-agent turn
    (:mod:`bot.failpoints`)."""
    deps = getattr(ctx, "deps", None)  # a bare context (unit tests) has no failpoints
    if deps is None:
        return lambda point: None
    kind = "run" if ctx.run_id else "turn"
    return lambda point: deps.failpoints.hit(f"{kind}.{point}")


def _hooks(ctx: ToolContext) -> Hooks:
    """The hooks of the work ``ctx`` serves (none for a bare context in unit tests)."""
    return getattr(ctx, "hooks", NO_HOOKS)


def _run_call(
    by_name: dict[str, Tool], call: ToolCallRequest, ctx: ToolContext, max_chars: int
) -> str:
    if call.cut_chars:
        kept = len(call.arguments)
        return (
            f"error: the arguments for {call.name} were too long ({kept + call.cut_chars:,} "
            f"characters; the limit is {kept:,}) and were cut, so the call did not run"
        )
    with tracing.span(f"execute_tool {call.name}", {"gen_ai.tool.name": call.name}):
        text = execute_tool(
            by_name, name=call.name, arguments=call.arguments, ctx=ctx, max_chars=max_chars
        )
    text = _hooks(ctx).after_tool(call, text)
    return as_model_sees(by_name.get(call.name), call.name, text)


def as_model_sees(tool: Tool | None, name: str, text: str) -> str:
    """A tool result as the model gets it (pure): the output of a tool marked
    ``untrusted_output`` wrapped as untrusted data, the one place that decides it
    (docs/architecture.md, "Untrusted content"); fanbot's own error texts stay bare."""
    if tool is not None and tool.untrusted_output and not text.startswith("error: "):
        return untrusted(name, text)
    return text


def _before_step(control: LoopControl, messages: list[Message]) -> None:
    control.checkpoint()
    for note in control.steering():
        text = f"[Message from the requester while you work] {note}"
        _append(messages, {"role": "user", "content": text}, control)


def _budget_warning(
    control: LoopControl,
    messages: list[Message],
    meter: Meter,
    model_name: str,
    schemas: list[Message],
) -> None:
    """Reserve the next call's spend; a nearly spent limit adds a system note to it and
    stands on the status card (raises :class:`~bot.errors.BudgetExceeded` when spent)."""
    warning = control.budget.before_call(model=model_name, messages=messages, tools=schemas)
    if warning:
        meter.note = warning
        _append(messages, {"role": "system", "content": warning}, control)
        control.progress(_status(meter, f"{Icon.WARNING} nearing its budget"))


def _waiting(control: LoopControl, meter: Meter) -> Callable[[str], None]:
    """What the model call tells of its wait for the rate limit: a standing note on the card
    (a note change is shown at once), the run's state, and a sign of life each time."""
    shown = [""]
    kept = [""]  # the note the wait covers (a budget warning), put back after it

    def on_wait(what: str) -> None:
        meter.touch(what or "model call sent")
        if what == shown[0]:
            return
        if not shown[0]:
            kept[0] = meter.note
        shown[0] = what
        meter.note = f"{Icon.WAITING} {what}" if what else kept[0]
        control.wait(what)
        control.progress(_status(meter, "calling the model"))

    return on_wait


def _append(messages: list[Message], message: Message, control: LoopControl) -> None:
    messages.append(message)
    control.record(message)


def _time_left(control: LoopControl) -> float | None:
    """Seconds before the run's soft deadline (None: no deadline), for the model call."""
    remaining = control.remaining()
    if remaining is not None and remaining <= 0:
        raise RunDeadline("soft deadline reached")
    return remaining


def short_args(arguments: str, limit: int = ARG_PREVIEW_CHARS) -> str:
    """``(https://example.com/a…)``: the call's first argument, on one line, for a status
    card; empty when there is none (pure, tolerates any text the model sent)."""
    try:
        data = json.loads(arguments or "{}")
    except (json.JSONDecodeError, RecursionError):
        return ""
    if not isinstance(data, dict) or not data:
        return ""
    first = next(iter(data.values()))
    text = " ".join((first if isinstance(first, str) else json.dumps(first)).split())
    text = text.replace("`", "'")
    if not text:
        return ""
    return f"({text if len(text) <= limit else text[: limit - 1] + '…'})"


def _status(meter: Meter, doing: str) -> str:
    """``step 3 · 🔧 search(…) · 1200 tokens`` (the run adds its tool count and time)."""
    mark = "~" if meter.usage.estimated else ""  # counted by fanbot (docs/models.md)
    return f"step {meter.steps} · {doing} · {mark}{meter.usage.total} tokens"
