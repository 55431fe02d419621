"""Plug-in tools loaded by forked workers through FANBOT_TOOLS (``tools.extra``)."""

from __future__ import annotations

import time

from bot.agent.context import ToolContext
from bot.agent.tools import NoArgs, Tool


def _slow(ctx: ToolContext, args: NoArgs) -> str:
    time.sleep(60)
    return "finished (should never happen within the test)"


def _boom(ctx: ToolContext, args: NoArgs) -> str:
    raise ValueError("the tool broke")


slow = Tool(name="slow_tool", description="Takes a minute.", args=NoArgs, run=_slow)
boom = Tool(name="boom_tool", description="Always raises.", args=NoArgs, run=_boom)
