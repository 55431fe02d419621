"""A subagent uses a skill the way the format intends, on forked workers: it sees the
skill's name and description in its system prompt, loads the instructions with
``load_skill``, runs the skill's script with ``execute`` in the real bubblewrap sandbox
(the skill read-only at ``/skills/csv-summary``) over a file its requester wrote, and
announces what the script printed. ``/subagents log 1 tools`` then shows the whole run.

The skill is the ``csv-summary`` example shipped in ``docs/skills/examples``.
"""

from __future__ import annotations

import pytest

from bot.testing import (
    Call,
    ChatRequest,
    FakeOpenAI,
    MemoryChannel,
    ScriptedModel,
    Stack,
    Text,
    ToolCalls,
    is_subagent,
    until,
)
from tests.e2e.conftest import stack_values
from tests.skill_support import open_examples

pytestmark = pytest.mark.e2e

EXAMPLES = open_examples()  # readable by the sandbox's uid wherever the clone is
SCRIPT = "python3 /skills/csv-summary/scripts/summarize.py data/sales.csv"
CSV = "city,units,note\nOslo,12,\nBergen,30,rain\nTromsø,9,snow\n"
TYPES = [
    {
        "name": "analyst",
        "description": "Looks into data files.",
        "skills": [str(EXAMPLES)],
    }
]


def last_result(req: ChatRequest, tool: str) -> str:
    return next(r.content for r in reversed(req.tool_results) if r.name == tool)


def analyst(req: ChatRequest) -> Text | ToolCalls:
    """The subagent: load the skill, run the command its instructions give, report."""
    done = [r.name for r in req.tool_results]
    if "load_skill" not in done:
        return ToolCalls([Call("load_skill", {"name": "csv-summary"})])
    if "execute" not in done:
        instructions = last_result(req, "load_skill")
        command = SCRIPT if SCRIPT.split(" data/")[0] in instructions else "false"
        return ToolCalls([Call("execute", {"command": command})])
    ran = last_result(req, "execute")
    return Text("Summary of data/sales.csv:\n" + ran.partition("stdout:\n")[2].split("\nstderr")[0])


def requester(req: ChatRequest) -> Text | ToolCalls:
    """The main agent: put the data in the workspace, then hand it to an analyst."""
    done = [r.name for r in req.tool_results]
    if "write_file" not in done:
        return ToolCalls([Call("write_file", {"file_path": "data/sales.csv", "content": CSV})])
    if "sessions_spawn" not in done:
        task = "Summarize data/sales.csv with the csv-summary skill."
        spawn = {"task": task, "subagent_type": "analyst", "label": "Sales"}
        return ToolCalls([Call("sessions_spawn", spawn)])
    return Text("An analyst is on it.")


async def test_a_subagent_loads_a_skill_and_runs_its_script_in_the_sandbox(
    redis_url: str,
) -> None:
    model = ScriptedModel().on(is_subagent, analyst).on(lambda r: True, requester)
    channel = MemoryChannel()
    async with FakeOpenAI(model, models=["fake-model"]) as llm:
        values = stack_values(redis_url, llm.base_url, subagent_types=TYPES)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("summarize the sales figures")
            [announce] = await until(lambda: channel.announces, timeout=60)
            await channel.say("/subagents log 1 tools")
            await stack.wait_for(
                lambda: any("Log of subagent #1" in r.text for r in channel.replies), timeout=20
            )
        subagent = [r.chat for r in llm.requests if is_subagent(r.chat)]
    log_text = next(r.text for r in channel.replies if "Log of subagent #1" in r.text)
    print(f"\n--- announce ---\n{announce.text}\n--- /subagents log 1 tools ---\n{log_text}")

    # Progressive disclosure: the name and description up front, the body on request.
    first = subagent[0]
    assert "csv-summary: Summarizes a CSV file" in first.system_prompt
    assert "Run the script with `execute`" not in first.system_prompt
    assert first.has_tool("load_skill") and first.has_tool("execute")
    loaded = last_result(subagent[-1], "load_skill")
    assert "Run the script with `execute`" in loaded and SCRIPT.split(" data/")[0] in loaded

    # The skill's script ran in the sandbox over the requester's file.
    ran = last_result(subagent[-1], "execute")
    assert ran.startswith("exit code 0 · ") and "files changed: none" in ran
    table = (
        "data/sales.csv: 3 rows, 3 columns\n- city: text, 3 distinct\n"
        "- units: number, min 9, max 30, mean 17\n- note: text, 2 distinct, 1 empty"
    )
    assert table in ran

    # The announce carries what the script printed; the log shows every step.
    assert announce.text.startswith('✅ Subagent #1 "Sales" (analyst) finished'), announce.text
    assert table in announce.text
    assert "load_skill" in log_text and "csv-summary" in log_text
    assert "execute" in log_text and "summarize.py data/sales.csv" in log_text
    assert "mean 17" in log_text
