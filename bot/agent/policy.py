"""Which tools each agent gets: the tool policy, as one pure function per kind of agent.

Layers, each applied in turn; **deny wins** everywhere, names may be ``fnmatch`` patterns
(``calc__*`` for every tool of an MCP server):

* ``FANBOT_TOOLS__ALLOW`` / ``__DENY`` — every agent;
* ``FANBOT_TOOLS__SUBAGENTS__ALLOW`` / ``__DENY`` — subagent runs only;
* a subagent type's own ``tools`` list — that type only (an allow list);
* ``FANBOT_AGENTS='{"main": {"tools": {"allow": [...], "deny": [...]}}}'`` — that agent's
  main turns.

A tool whose schema depends on the configuration (``sessions_spawn``) is handed out
configured (:meth:`~bot.agent.tools.Tool.configured`).

An allow list only narrows the ordinary tools. The main agent's session tools
(``sessions_spawn``…) are its purpose, so an allow list meant for, say, subagents never
removes them: only a deny that names them does. ``load_skill`` is kept the same way for
every agent (an agent that sees no skill is not given it; docs/skills.md). Subagents never get
session tools (they are leaves).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.agent.tools import SESSION_TOOLS, Tool
from bot.agent.tools.skills import LOAD_SKILL
from bot.config import Settings, SubagentType


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One layer of policy. An empty ``allow`` allows everything."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


SKILL_TOOLS = frozenset({LOAD_SKILL})


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def apply(
    names: Sequence[str], rules: Sequence[Rule], *, protected: frozenset[str] = frozenset()
) -> list[str]:
    """``names`` that survive every rule, in order (pure).

    A ``protected`` name is removed only by a deny that matches it, never by an allow list.
    """
    kept = list(names)
    for rule in rules:
        kept = [
            n
            for n in kept
            if not _matches(n, rule.deny)
            and (not rule.allow or n in protected or _matches(n, rule.allow))
        ]
    return kept


def main_agent_rules(settings: Settings, agent_id: str) -> list[Rule]:
    agent = settings.agent(agent_id)
    return [
        Rule(allow=tuple(settings.tools.allow), deny=tuple(settings.tools.deny)),
        Rule(allow=tuple(agent.tools.allow), deny=tuple(agent.tools.deny)),
    ]


def subagent_rules(settings: Settings, sub_type: SubagentType) -> list[Rule]:
    sub = settings.tools.subagents
    return [
        Rule(allow=tuple(settings.tools.allow), deny=tuple(settings.tools.deny)),
        Rule(allow=tuple(sub.allow), deny=tuple(sub.deny)),
        Rule(allow=tuple(sub_type.tools)),
    ]


def main_agent_tools(settings: Settings, agent_id: str, pool: Sequence[Tool]) -> list[Tool]:
    """The main agent's tools out of ``pool`` (session tools included)."""
    by_name = {t.name: t for t in pool}
    protected = SESSION_TOOLS | {LOAD_SKILL}
    kept = apply(list(by_name), main_agent_rules(settings, agent_id), protected=protected)
    return [by_name[n].configured(settings) for n in kept]


def subagent_tools(settings: Settings, sub_type: SubagentType, pool: Sequence[Tool]) -> list[Tool]:
    """A subagent type's tools out of ``pool`` (never a session tool)."""
    by_name = {t.name: t for t in pool if t.name not in SESSION_TOOLS}
    kept = apply(list(by_name), subagent_rules(settings, sub_type), protected=SKILL_TOOLS)
    return [by_name[n].configured(settings) for n in kept]
