"""The tools each subagent type gets (the types themselves are in :mod:`bot.runs.type_registry`)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent import policy
from bot.agent.tools import SESSION_TOOLS, Tool
from bot.agent.tools.mcp import McpPool
from bot.agent.tools.toolbox import all_tools
from bot.config import Settings, SubagentType
from bot.runs.type_registry import GENERAL_PURPOSE, subagent_types

__all__ = ["GENERAL_PURPOSE", "available_tools", "subagent_types", "tools_for_type"]


def available_tools(settings: Settings, *, mcp: McpPool | None = None) -> list[Tool]:
    """Built-in, plug-in and MCP tools (never session tools: those are the main agent's)."""
    return [t for t in all_tools(settings, mcp=mcp) if t.name not in SESSION_TOOLS]


def tools_for_type(
    sub_type: SubagentType,
    settings: Settings,
    tools: Sequence[Tool] | None = None,
    *,
    mcp: McpPool | None = None,
) -> list[Tool]:
    """The type's tools by policy (:mod:`bot.agent.policy`); never a session tool, and
    none for a compiled type (its runnable has its own)."""
    if sub_type.runnable is not None:
        return []
    pool = tools if tools is not None else available_tools(settings, mcp=mcp)
    return policy.subagent_tools(settings, sub_type, pool)
