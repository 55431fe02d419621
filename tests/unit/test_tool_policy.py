"""Which tools each agent gets (pure, table-driven): deny wins, patterns, session tools."""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent import policy
from bot.agent.policy import Rule, apply
from bot.agent.tools import SESSION_TOOLS, NoArgs, Tool
from bot.config import Settings, SubagentType

NAMES = ["sessions_spawn", "current_time", "calculate", "calc__add", "calc__div", "execute"]

APPLY = [
    ([], NAMES),
    ([Rule(allow=("current_time",))], ["sessions_spawn", "current_time"]),  # spawn kept
    ([Rule(deny=("sessions_spawn",))], NAMES[1:]),  # only a deny removes it
    ([Rule(allow=("calc__*",))], ["sessions_spawn", "calc__add", "calc__div"]),
    ([Rule(allow=("calc__*",), deny=("calc__div",))], ["sessions_spawn", "calc__add"]),
    ([Rule(allow=("execute",)), Rule(deny=("execute",))], ["sessions_spawn"]),  # deny wins
    ([Rule(allow=("a*",)), Rule(allow=("calculate",))], ["sessions_spawn"]),  # layers narrow
]


@pytest.mark.parametrize(("rules", "kept"), APPLY)
def test_rules_apply_in_turn_and_deny_wins(rules: list[Rule], kept: list[str]) -> None:
    assert apply(NAMES, rules, protected=frozenset({"sessions_spawn"})) == kept


def tool(name: str) -> Tool:
    return Tool(name=name, description="", args=NoArgs, run=lambda c, a: "")


POOL = [tool(n) for n in [*sorted(SESSION_TOOLS), "current_time", "calculate", "execute"]]


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def settings(**values: Any) -> Settings:
    return Settings(**values)


def test_an_allow_list_meant_for_subagents_never_stops_the_main_agent_spawning() -> None:
    s = settings(tools={"allow": ["current_time"]})
    main = names(policy.main_agent_tools(s, "main", POOL))
    assert "sessions_spawn" in main and "calculate" not in main
    assert names(policy.subagent_tools(s, SubagentType(name="t"), POOL)) == ["current_time"]


def test_each_layer_does_what_it_says() -> None:
    s = settings(
        tools={"deny": ["execute"], "subagents": {"deny": ["calculate"]}},
        agents={"main": {"tools": {"deny": ["sessions_send"]}}},
    )
    main = names(policy.main_agent_tools(s, "main", POOL))
    assert "execute" not in main and "sessions_send" not in main and "calculate" in main
    sub = names(policy.subagent_tools(s, SubagentType(name="t"), POOL))
    assert sub == ["current_time"]  # no session tools, execute denied, calculate denied
    typed = SubagentType(name="t", tools=["calculate", "current_time"])
    assert names(policy.subagent_tools(settings(), typed, POOL)) == ["current_time", "calculate"]


def test_a_deny_naming_a_session_tool_removes_it_from_the_main_agent() -> None:
    s = settings(tools={"deny": ["sessions_spawn"]})
    assert "sessions_spawn" not in names(policy.main_agent_tools(s, "main", POOL))
