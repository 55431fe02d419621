"""``allow_agents``: which agents an agent may target with ``sessions_spawn``'s ``agentId``
(bot.runs.spawn.check_agent, pure)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.config import Settings
from bot.errors import SpawnRejected
from bot.runs.spawn import allowed_agents, check_agent


def settings(**agents: Any) -> Settings:
    return Settings(agents={"main": {}, "ops": {}, "docs": {}, **agents})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "target", "refusal"),
    [
        ([], "main", None),  # its own agent, always
        ([], "ops", "agentId 'ops' is not allowed for agent 'main'; allowed: main"),
        (["ops"], "ops", None),
        (["ops"], "docs", "agentId 'docs' is not allowed for agent 'main'; allowed: main, ops"),
        (["*"], "docs", None),
        (["*"], "nope", "unknown agentId 'nope'; known: docs, main, ops"),
        ([], "nope", "unknown agentId 'nope'; known: docs, main, ops"),
    ],
)
def test_check_agent(rule: list[str], target: str, refusal: str | None) -> None:
    s = settings(main={"allow_agents": rule})
    if refusal is None:
        check_agent(s, "main", target)
    else:
        with pytest.raises(SpawnRejected) as info:
            check_agent(s, "main", target)
        assert str(info.value) == refusal


def test_the_star_allows_every_known_agent_and_lists_them() -> None:
    s = settings(ops={"allow_agents": ["*"]})
    assert allowed_agents(s, "ops") == ["ops", "docs", "main"]
    assert allowed_agents(s, "docs") == ["docs"]  # no rule: only itself
    assert allowed_agents(settings(ops={"allow_agents": ["gone"]}), "ops") == ["ops"]


def test_an_agent_not_in_fanbot_agents_may_target_only_itself() -> None:
    s = Settings(agent_id="solo")
    check_agent(s, "solo", "solo")
    with pytest.raises(SpawnRejected, match="unknown agentId 'ops'; known: solo"):
        check_agent(s, "solo", "ops")


@pytest.mark.parametrize("bad", ["", "a b", "ops,docs", "**"])
def test_a_malformed_entry_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not an agent id or"):
        settings(main={"allow_agents": [bad]})
