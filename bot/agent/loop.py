"""The tool loop: call the model, run the tools it asks for, repeat until it answers.

Between steps the loop asks its control for a checkpoint (stop flag, soft deadline) and for
steering messages (``/subagents send``). Usage accumulates in a :class:`Meter` the caller
owns, so the tokens spent survive any exception that ends the run.

Sizes stay bounded: the model client keeps at most ``openai.max_reply_chars`` of a reply,
and each tool result is cut to ``max_tool_chars`` before the model or the transcript sees it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

from bot.agent.context import ToolContext
from bot.agent.llm import ChatModel, ToolCallRequest
from bot.agent.tools import Tool, execute_tool
from bot.errors import RunDeadline
from bot.steps import LoopControl, LoopResult, Message, Meter

log = logging.getLogger(__name__)

ARG_PREVIEW_CHARS = 40

__all__ = ["LoopControl", "LoopResult", "Meter", "run_loop"]


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
) -> LoopResult:
    """Drive the model until it answers without tool calls or ``max_steps`` is reached."""
    control = control or LoopControl()
    by_name = {t.name: t for t in tools}
    schemas = [t.schema() for t in tools]
    for _ in range(max_steps):
        _before_step(control, messages)
        completion = model.complete(
            model=model_name,
            messages=messages,
            tools=schemas,
            thinking=thinking,
            timeout=_request_timeout(control, model.settings.request_timeout),
            budget=control.remaining(),
        )
        meter.usage += completion.usage
        meter.steps += 1
        if completion.cut_chars:
            log.warning(
                "reply of %s cut: %d characters past the limit", model_name, completion.cut_chars
            )
        _append(messages, completion.as_message(), control)
        if completion.content:
            meter.last_text = completion.content
        if not completion.tool_calls:
            control.progress(_status(meter, "answering"))
            return LoopResult(text=completion.content, complete=True)
        for call in completion.tool_calls:
            control.checkpoint()
            meter.tool_calls += 1
            control.progress(_status(meter, f"🔧 {call.name}{short_args(call.arguments)}"))
            result = _run_call(by_name, call, ctx, max_tool_chars)
            _append(messages, {"role": "tool", "tool_call_id": call.id, "content": result}, control)
    return LoopResult(text=meter.last_text, complete=False)


def _run_call(
    by_name: dict[str, Tool], call: ToolCallRequest, ctx: ToolContext, max_chars: int
) -> str:
    if call.cut_chars:
        kept = len(call.arguments)
        return (
            f"error: the arguments for {call.name} were too long ({kept + call.cut_chars:,} "
            f"characters; the limit is {kept:,}) and were cut, so the call did not run"
        )
    return execute_tool(
        by_name, name=call.name, arguments=call.arguments, ctx=ctx, max_chars=max_chars
    )


def _before_step(control: LoopControl, messages: list[Message]) -> None:
    control.checkpoint()
    for note in control.steering():
        text = f"[Message from the requester while you work] {note}"
        _append(messages, {"role": "user", "content": text}, control)


def _append(messages: list[Message], message: Message, control: LoopControl) -> None:
    messages.append(message)
    control.record(message)


def _request_timeout(control: LoopControl, configured: float) -> float:
    remaining = control.remaining()
    if remaining is None:
        return configured
    if remaining <= 0:
        raise RunDeadline("soft deadline reached")
    return max(1.0, min(configured, remaining))


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
    elapsed = int(time.monotonic() - meter.started)
    tokens = meter.usage.total
    return f"step {meter.steps} · {doing} · {tokens} tokens · {elapsed}s"
