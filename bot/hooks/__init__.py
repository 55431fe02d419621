"""Hooks: Python callables a subagent type's or an agent's ``middleware`` names by dotted
path, run around each model call and tool call, at a run's end and at fan-in
(docs/hooks.md).

A hook is one callable taking an event; it looks at the event's type, may change the
fields the event marks as changeable, and returns None. A :class:`ToolCall` may be vetoed
(``raise Veto("why")``)::

    from bot.hooks import Event, ToolCall, ToolResult, Veto

    def redact(event: Event) -> None:
        if isinstance(event, ToolResult):
            event.result = event.result.replace(SECRET, "[redacted]")

    def no_shell(event: Event) -> None:
        if isinstance(event, ToolCall) and event.tool == "execute":
            raise Veto("shell commands are not allowed here")

Any other exception fails the run, its notes naming the hook.
"""

from bot.hooks.events import (
    Event,
    FanIn,
    FanInResult,
    ModelCall,
    ModelReply,
    RunEnd,
    ToolCall,
    ToolResult,
    Veto,
)
from bot.hooks.resolve import Hook

__all__ = [
    "Event",
    "FanIn",
    "FanInResult",
    "Hook",
    "ModelCall",
    "ModelReply",
    "RunEnd",
    "ToolCall",
    "ToolResult",
    "Veto",
]
