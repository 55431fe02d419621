"""Every tool family the agents can be given, gathered in one place.

Each family is a function ``(settings) -> list[Tool]`` that returns nothing when it is not
configured or cannot work here (no search provider, no sandbox), so an agent is never
offered a tool that cannot run. MCP tools come from the worker's :class:`McpPool`, when
one is given. Policy (allow/deny per agent and type) is applied later.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.agent.tools import BUILTIN_TOOLS, Tool, load_plugin_tools
from bot.agent.tools.files import file_tools
from bot.agent.tools.mcp import McpPool, mcp_tools
from bot.agent.tools.sandbox import sandbox_tools
from bot.agent.tools.skills import skill_tools
from bot.agent.tools.web import web_tools
from bot.config import Settings

Family = Callable[[Settings], list[Tool]]


def _builtin(settings: Settings) -> list[Tool]:
    return list(BUILTIN_TOOLS)


def _plugins(settings: Settings) -> list[Tool]:
    return load_plugin_tools(settings.tools.extra)


FAMILIES: list[Family] = [
    _builtin,
    file_tools,
    skill_tools,
    sandbox_tools,
    web_tools,
    _plugins,
]


def all_tools(settings: Settings, *, mcp: McpPool | None = None) -> list[Tool]:
    """Every tool the configured families offer (later names do not shadow earlier ones);
    the MCP servers' last, through ``mcp`` (none without it)."""
    seen: dict[str, Tool] = {}
    found = [tool for family in FAMILIES for tool in family(settings)]
    for tool in [*found, *(mcp_tools(settings, mcp) if mcp is not None else ())]:
        seen.setdefault(tool.name, tool)
    return list(seen.values())
