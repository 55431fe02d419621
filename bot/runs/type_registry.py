"""The subagent types a run can have: the built-in ones (after learn-claude-code's agent
registry) plus config's ``FANBOT_SUBAGENT_TYPES``, where a type of the same name replaces a
built-in one.

==================  ==========================================================
built-in type       tools
==================  ==========================================================
``general-purpose`` every tool the policy allows
``explore``         read-only: ``web_search``, ``web_fetch``, ``ls``, ``read_file``, ``grep``
``plan``            the same read-only tools; answers with a numbered step plan
``code``            files (``ls``, ``read_file``, ``write_file``, ``edit_file``, ``grep``)
                    and ``execute``
==================  ==========================================================

A tool a deployment does not offer (no search provider, no sandbox) is simply absent.
"""

from __future__ import annotations

from bot.config import Settings, SubagentType

_LEAF = (
    "You are a subagent working on one task in isolation. You cannot talk to the user "
    "and cannot spawn other agents. "
)
_FINISH = (
    " Finish with one final answer that stands on its own: it is posted to the team's "
    "thread as your result. If there is nothing worth posting, answer exactly ANNOUNCE_SKIP."
)
READ_TOOLS = ["web_search", "web_fetch", "ls", "read_file", "grep"]
CODE_TOOLS = ["ls", "read_file", "write_file", "edit_file", "grep", "execute"]

GENERAL_PURPOSE = SubagentType(
    name="general-purpose",
    description="A capable generalist for research, analysis, writing and multi-step tasks.",
    system_prompt=_LEAF + "Use your tools when they help." + _FINISH,
)
EXPLORE = SubagentType(
    name="explore",
    description="Read-only research: searches the web and reads pages and workspace files, "
    "changes nothing, returns a concise summary of what it found.",
    system_prompt=_LEAF + "Search and read; never change anything. Report what you found "
    "concisely, with the sources (URLs, file paths) it came from." + _FINISH,
    tools=READ_TOOLS,
)
PLAN = SubagentType(
    name="plan",
    description="Read-only planning: studies the task (web, workspace files) and answers "
    "with a numbered step-by-step plan; changes nothing.",
    system_prompt=_LEAF + "Analyse the task, reading what you need; never change anything. "
    "Answer with a numbered plan of concrete steps, each with what it needs and how to "
    "tell it is done." + _FINISH,
    tools=READ_TOOLS,
)
CODE = SubagentType(
    name="code",
    description="Implementation: reads and writes workspace files and runs commands "
    "(execute, sandboxed) to build, change and test code.",
    system_prompt=_LEAF + "Implement the change efficiently: read what you need, edit the "
    "workspace files, and run commands to check your work. Say what you changed and how "
    "you verified it." + _FINISH,
    tools=CODE_TOOLS,
)
BUILT_IN = (GENERAL_PURPOSE, EXPLORE, PLAN, CODE)


def subagent_types(settings: Settings) -> dict[str, SubagentType]:
    """All types by name, built-in ones first; config may replace one by reusing its name."""
    types = {t.name: t for t in BUILT_IN}
    types.update({t.name: t for t in settings.subagent_types})
    return types


ORCHESTRATOR = (
    "You are a subagent that leads one task. You cannot talk to the user. For parts that "
    "are independent or big, call sessions_spawn once per part (several calls in one "
    "response run in parallel); when all of them have ended you get their statuses and "
    "results and go on. Use your tools when they help." + _FINISH
)


def system_prompt(settings: Settings, type_name: str) -> str:
    """The type's system prompt, else the general-purpose one's (an orchestrator's default
    says it may spawn)."""
    types = subagent_types(settings)
    chosen = types.get(type_name, GENERAL_PURPOSE)
    if chosen.system_prompt:
        return chosen.system_prompt
    if chosen.role == "orchestrator":
        return ORCHESTRATOR
    return types[GENERAL_PURPOSE.name].system_prompt
