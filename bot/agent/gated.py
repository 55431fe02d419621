"""The one gate every tool loop passes its calls through, and the step a parked agent
finishes once a person decided (docs/architecture.md, "Approvals: one gate").

Whoever calls a tool (a main-agent turn, a continuation turn, a subagent run, an
orchestrator's nested loop) asks :func:`gate_for`'s gate before each call: the policy is
:func:`bot.runs.approval_gate.needs_approval`, decided there alone; only how the caller
parks differs (a run parks its run, a turn its turn). A resumed caller finishes its step
with :func:`decided_step`: the decided call runs with the approved arguments or gets its
denial, and the calls after it go through the gate again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bot.agent.context import ToolContext
from bot.agent.loop import Gate, run_calls
from bot.agent.tools import Tool
from bot.config import Settings, SubagentType
from bot.deps import Deps
from bot.errors import RunFailed
from bot.models.completion import ToolCallRequest
from bot.runs.approval_gate import denied_result, needs_approval
from bot.steps import LoopControl, Meter
from bot.store.approvals import ApprovalState, PendingCall

Park = Callable[[list[PendingCall]], None]
"""Records the approval the first of these calls needs and raises
:class:`~bot.errors.RunParked` (the caller's own way to park)."""


def gate_for(settings: Settings, sub_type: SubagentType | None, park: Park) -> Gate:
    """The gate of one caller: a call the policy holds parks the caller (with the calls of
    its step after it) before it runs."""

    def gate(calls: Sequence[ToolCallRequest]) -> None:
        if needs_approval(settings, sub_type, calls[0].name):
            park([PendingCall(id=c.id, name=c.name, arguments=c.arguments) for c in calls])

    return gate


def decided_step(
    deps: Deps,
    approval_id: str,
    *,
    gate: Gate,
    tools: Sequence[Tool],
    ctx: ToolContext,
    messages: list[dict[str, Any]],
    meter: Meter,
    control: LoopControl,
) -> None:
    """Finish the step a caller parked in: the decided call runs (with the approved
    arguments) or gets its denial as result, then the calls after it run through the gate."""
    approval = deps.approvals.get(approval_id)
    if approval is None:
        raise RunFailed(f"approval {approval_id} is gone; the work cannot go on")
    limit = deps.settings.subagents.max_result_chars
    call = approval.call
    if approval.state is ApprovalState.APPROVED:
        decided = [ToolCallRequest(id=call.id, name=call.name, arguments=approval.arguments)]
        run_calls(decided, tools=tools, ctx=ctx, messages=messages, meter=meter,
                  control=control, max_tool_chars=limit)  # fmt: skip
    else:
        denial = {"role": "tool", "tool_call_id": call.id, "content": denied_result(approval)}
        messages.append(denial)
        control.record(denial)
    rest = [
        ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments) for c in approval.calls[1:]
    ]
    run_calls(rest, tools=tools, ctx=ctx, messages=messages, meter=meter, control=control,
              max_tool_chars=limit, gate=gate)  # fmt: skip


def approved_call(deps: Deps, approval_id: str, call: ToolCallRequest) -> ToolCallRequest | None:
    """``call``, with the arguments a person approved, if ``approval_id`` approved it (a
    lost attempt was that approval's resume job): it runs again, not asked again."""
    approval = deps.approvals.get(approval_id) if approval_id else None
    if approval is None or approval.state is not ApprovalState.APPROVED:
        return None
    if approval.call.id != call.id:
        return None
    return ToolCallRequest(id=call.id, name=call.name, arguments=approval.arguments)
