"""The subagent types a run can have: the built-in ``general-purpose`` one plus config's."""

from __future__ import annotations

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


def system_prompt(settings: Settings, type_name: str) -> str:
    """The type's system prompt, else the built-in one's."""
    types = subagent_types(settings)
    chosen = types.get(type_name, GENERAL_PURPOSE)
    return chosen.system_prompt or types[GENERAL_PURPOSE.name].system_prompt
