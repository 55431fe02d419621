"""A subagent loads a skill and uses one of its files, end to end: a message, a spawn, forked
workers, ``load_skill``, ``read_file`` under ``/skills``, an announce that carries what the
file said, and ``/subagents log 1 tools`` showing each step.

The skill is written the way public collections write them (tests/skill_support.py); the
workers read it from ``FANBOT_SKILLS__DIRS``.
"""

from __future__ import annotations

import re
from pathlib import Path

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
from tests.skill_support import pdf_forms, release_notes

pytestmark = pytest.mark.e2e

FIELDS = "/skills/pdf-forms/references/fields.md"


def result_of(req: ChatRequest, tool: str) -> str:
    return next(r.content for r in reversed(req.tool_results) if r.name == tool)


def subagent_steps(req: ChatRequest) -> Text | ToolCalls:
    done = [r.name for r in req.tool_results]
    if "load_skill" not in done:
        return ToolCalls([Call("load_skill", {"name": "pdf-forms"})])
    if "read_file" not in done:
        return ToolCalls([Call("read_file", {"file_path": FIELDS})])
    code = re.search(r"FORM-\d+", result_of(req, "read_file"))
    return Text(f"Form filled; reference code {code.group(0) if code else '?'} (from {FIELDS}).")


async def test_a_run_loads_a_skill_reads_its_file_and_announces_what_it_said(
    redis_url: str, tmp_path: Path
) -> None:
    pdf_forms(tmp_path / "skills")
    release_notes(tmp_path / "skills")
    model = (
        ScriptedModel(default=Text("On it."))
        .on(is_subagent, subagent_steps)
        .on(
            "visa form",
            ToolCalls([Call("sessions_spawn", {"task": "Fill in the visa form", "label": "Form"})]),
            times=1,
        )
    )
    values = stack_values(redis_url, "", skills={"dirs": [str(tmp_path / "skills")]})
    channel = MemoryChannel()
    async with FakeOpenAI(model) as llm:
        values["openai"]["base_url"] = llm.base_url
        async with Stack(values=values, adapters=[channel], workers=1, pool="fork") as stack:
            await channel.say("please fill in the visa form")
            [announce] = await until(lambda: channel.announces, timeout=60)
            await channel.say("/subagents log 1 tools")
            await stack.wait_for(
                lambda: any("Log of subagent #1" in r.text for r in channel.replies), timeout=20
            )
    log = next(r.text for r in channel.replies if "Log of subagent #1" in r.text)
    print(f"\n--- announce ---\n{announce.text}\n--- /subagents log 1 tools ---\n{log}")

    assert announce.text.startswith('✅ Subagent #1 "Form"'), announce.text
    assert "reference code FORM-7731" in announce.text  # what the skill's file said
    subagent = [r.chat for r in llm.requests if is_subagent(r.chat)]
    main = [r.chat for r in llm.requests if not is_subagent(r.chat)]
    for req in (subagent[0], main[0]):  # both see the skills' names, and the tool
        assert "## Skills" in req.system_prompt
        assert "- pdf-forms: Fill in PDF forms" in req.system_prompt
        assert "- release-notes: Write release notes" in req.system_prompt
        assert req.has_tool("load_skill")
    loaded = result_of(subagent[-1], "load_skill")
    assert loaded.startswith("# Skill pdf-forms") and FIELDS in loaded
    assert "The form's field called **Reference code**" in loaded  # the body, as instructions
    assert "<untrusted" not in loaded
    assert "reference_code: FORM-7731" in result_of(subagent[-1], "read_file")
    assert "load_skill" in log and "pdf-forms" in log and FIELDS in log
