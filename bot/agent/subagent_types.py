"""Subagent types: the built-in ``general-purpose`` one plus those defined in config."""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent.tools import BUILTIN_TOOLS, SESSION_TOOLS, Tool, allowed, load_plugin_tools
from bot.config import Settings, SubagentType

GENERAL_PURPOSE = SubagentType(
    name="general-purpose",
    description="A capable generalist for research, analysis, writing and multi-step tasks.",
    system_prompt=(
        "You are a subagent working on one task in isolation. You cannot talk to the user "
        "and cannot spawn other agents. Use your tools when they help. Finish with one "
        "final answer that stands on its own: it is posted to the team's thread as your "
        "result. If there is nothing worth posting, answer exactly ANNOUNCE_SKIP."
    ),
)


def subagent_types(settings: Settings) -> dict[str, SubagentType]:
    """All types by name; config may override the built-in one by reusing its name."""
    types = {GENERAL_PURPOSE.name: GENERAL_PURPOSE}
    types.update({t.name: t for t in settings.subagent_types})
    return types


def available_tools(settings: Settings) -> list[Tool]:
    """Built-in plus plug-in tools (never session tools: those are the main agent's)."""
    tools = [*BUILTIN_TOOLS, *load_plugin_tools(settings.tools.extra)]
    return [t for t in tools if t.name not in SESSION_TOOLS]


def tools_for_type(
    sub_type: SubagentType, settings: Settings, tools: Sequence[Tool] | None = None
) -> list[Tool]:
    """The type's tool list (empty = every tool) filtered by policy, session tools removed."""
    pool = {t.name: t for t in (tools if tools is not None else available_tools(settings))}
    wanted = sub_type.tools or list(pool)
    names = allowed(wanted, allow=settings.tools.allow, deny=settings.tools.deny)
    return [pool[n] for n in names if n in pool and n not in SESSION_TOOLS]
