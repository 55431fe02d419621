"""Hooks (``middleware``) and plug-in tools that forked workers import by dotted path
(docs/hooks.md); the workers run with the repository as their working directory."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from bot.agent.context import ToolContext
from bot.agent.tools import NoArgs, Tool
from bot.hooks import Event, ToolCall, ToolResult, Veto

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
SECRETS = re.compile(r"sk-[A-Za-z0-9-]{16,}")


def redact_secrets(event: Event) -> None:
    """Replace anything shaped like an API key in a tool's result."""
    if isinstance(event, ToolResult):
        event.result = SECRETS.sub("[redacted]", event.result)


def no_touch(event: Event) -> None:
    """Veto the ``touch`` tool."""
    if isinstance(event, ToolCall) and event.tool == "touch":
        raise Veto("touching files is not allowed here")


def broken(event: Event) -> None:
    """Fails at the first tool call it sees."""
    if isinstance(event, ToolCall):
        raise RuntimeError("the hook broke")


class TouchArgs(BaseModel):
    path: str


def _touch(ctx: ToolContext, args: TouchArgs) -> str:
    Path(args.path).write_text("touched")
    return f"created {args.path}"


def _leak(ctx: ToolContext, args: NoArgs) -> str:
    return f"config loaded; api_key={SECRET}"


tools = [
    Tool(name="touch", description="Create a file.", args=TouchArgs, run=_touch),
    Tool(name="leak", description="Read the service config.", run=_leak),
]
