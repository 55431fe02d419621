"""Subagent types (pure, table-driven): their configuration and its errors, the built-in
ones and their tools, the spawn tool's schema, model and timeout resolution, structured
answers, forked history, and how a compiled runnable's states are read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.agent import compiled, policy, structured
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.subagent import fork_messages
from bot.agent.subagent_types import subagent_types, tools_for_type
from bot.agent.tools import NoArgs, Tool
from bot.config import Settings, SubagentType, load_settings
from bot.errors import ConfigError, RunFailed
from bot.runs.line import slot_job
from bot.runs.render import render_structured
from bot.runs.spawn import resolve_model, resolve_timeout
from bot.types import RunRecord, ThreadRef, Usage


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


BAD_TYPES = [
    ([{"name": "a", "middlewares": []}], "FANBOT_SUBAGENT_TYPES[0].middlewares is not a setting"),
    (
        [{"name": "a", "middleware": ["no_dots"]}],
        "FANBOT_SUBAGENT_TYPES[0].middleware: 'no_dots' is not",
    ),
    ([{"name": "a", "interrupt_on": {}}], "FANBOT_SUBAGENT_TYPES[0].interrupt_on is not a setting"),
    ([{"name": "a"}, {"name": "a"}], "subagent type 'a' is defined twice"),
    ([{"name": "a", "runnable": "nosuch_module_x:f"}], "cannot import 'nosuch_module_x'"),
    ([{"name": "a", "runnable": "no colon"}], "is not 'module:attribute'"),
    ([{"name": "a", "runnable": "json:loads", "tools": ["x"]}], "so tools cannot be set"),
    ([{"name": "a", "output_schema": {"type": "objekt"}}], "output_schema: not a valid JSON"),
    ([{"name": "a", "thinking": "ultra"}], "FANBOT_SUBAGENT_TYPES[0].thinking: must be one of"),
    ([{"name": "a", "context": "shared"}], "FANBOT_SUBAGENT_TYPES[0].context"),
]


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("types", "message"), BAD_TYPES)
def test_a_bad_type_is_a_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, types: list[dict[str, Any]], message: str
) -> None:
    monkeypatch.setenv("FANBOT_SUBAGENT_TYPES", json.dumps(types))
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert message in str(caught.value)


@pytest.mark.usefixtures("clean_env")
def test_every_type_key_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    full = {
        "name": "r",
        "description": "d",
        "system_prompt": "p",
        "tools": ["web_fetch"],
        "model": "m",
        "thinking": "low",
        "context": "fork",
        "output_schema": {"type": "object"},
    }
    compiled_type = {"name": "c", "runnable": "tests.compiled_runnables:echo"}
    monkeypatch.setenv("FANBOT_SUBAGENT_TYPES", json.dumps([full, compiled_type]))
    r, c = load_settings().subagent_types
    assert (r.context, r.thinking, r.output_schema) == ("fork", "low", {"type": "object"})
    assert c.runnable == "tests.compiled_runnables:echo" and c.context == "isolated"


def test_built_in_types_and_a_configured_override() -> None:
    types = subagent_types(Settings())
    assert list(types) == ["general-purpose", "explore", "plan", "code"]
    assert all(t.description for t in types.values())
    mine = SubagentType(name="explore", description="mine")
    assert subagent_types(Settings(subagent_types=[mine]))["explore"].description == "mine"


def _tool(name: str) -> Tool:
    return Tool(name=name, description="", args=NoArgs, run=lambda c, a: "")


FILES = ["ls", "read_file", "write_file", "edit_file", "grep"]
POOL = [
    _tool(n) for n in ["current_time", *FILES, "execute", "web_fetch", "web_search", "calc__add"]
]


@pytest.mark.parametrize(
    ("type_name", "tools"),
    [
        ("general-purpose", [t.name for t in POOL]),
        ("explore", ["ls", "read_file", "grep", "web_fetch", "web_search"]),
        ("plan", ["ls", "read_file", "grep", "web_fetch", "web_search"]),
        ("code", ["ls", "read_file", "write_file", "edit_file", "grep", "execute"]),
    ],
)
def test_built_in_types_get_their_tools(type_name: str, tools: list[str]) -> None:
    s = Settings()
    sub_type = subagent_types(s)[type_name]
    assert [t.name for t in tools_for_type(sub_type, s, POOL)] == tools


def test_a_compiled_type_gets_no_tools() -> None:
    sub_type = SubagentType(name="c", runnable="tests.compiled_runnables:echo")
    assert tools_for_type(sub_type, Settings(), POOL) == []


def spawn_schema(settings: Settings) -> dict[str, Any]:
    spawn = next(t for t in policy.main_agent_tools(settings, "main", SESSION_TOOLS_LIST))
    assert spawn.name == "sessions_spawn"
    return spawn.schema()["function"]


def test_the_spawn_tool_enumerates_the_types_and_describes_each() -> None:
    mine = SubagentType(name="researcher", description="Digs deep into one question.")
    function = spawn_schema(Settings(subagent_types=[mine]))
    choice = function["parameters"]["properties"]["subagent_type"]
    assert choice["enum"] == ["general-purpose", "explore", "plan", "code", "researcher"]
    assert choice["default"] == "general-purpose"
    assert "- researcher: Digs deep into one question." in function["description"]
    assert "- explore: Read-only research" in function["description"]
    context = function["parameters"]["properties"]["context"]
    assert "fork" in json.dumps(context)


def test_the_spawn_arguments_reject_an_unknown_type_and_default_a_missing_one() -> None:
    spawn = next(t for t in policy.main_agent_tools(Settings(), "main", SESSION_TOOLS_LIST))
    assert spawn.args.model_validate({"task": "x", "subagent_type": None}).subagent_type == (
        "general-purpose"
    )
    with pytest.raises(ValidationError, match="'general-purpose', 'explore', 'plan' or 'code'"):
        spawn.args.model_validate({"task": "x", "subagent_type": "nope"})
    assert spawn.args.model_validate({"task": "x", "runTimeoutSeconds": 0}).runTimeoutSeconds == 0


MODELS = [
    # (agent settings, subagents.model, requested, expected)
    ({}, None, None, "gpt-global"),
    ({}, "sub-default", None, "sub-default"),
    ({"model": "agent-own"}, "sub-default", None, "agent-own"),
    ({"model": "agent-own", "subagent_model": "agent-sub"}, "sub-default", None, "agent-sub"),
    ({"model": "agent-own"}, None, "agent-own", "agent-own"),
    ({"model": "agent-own"}, None, "gpt-global", "gpt-global"),
]


@pytest.mark.parametrize(("agent", "sub_model", "requested", "expected"), MODELS)
def test_model_resolution_order(
    agent: dict[str, str], sub_model: str | None, requested: str | None, expected: str
) -> None:
    s = Settings(
        openai={"model": "gpt-global", "models": ["gpt-global"]},  # type: ignore[arg-type]
        subagents={"model": sub_model},  # type: ignore[arg-type]
        agents={"main": agent},  # type: ignore[dict-item]
    )
    assert resolve_model(s, "main", requested, lambda: None) == (expected, [])


@pytest.mark.parametrize(
    ("requested", "timeout", "warned"),
    [
        (None, 600, False),
        (0, 3600, False),
        (30, 30, False),
        (3600, 3600, False),
        (9999, 3600, True),
    ],
)
def test_timeout_resolution(requested: int | None, timeout: int, warned: bool) -> None:
    s = Settings(subagents={"max_run_timeout_seconds": 3600})  # type: ignore[arg-type]
    got, warnings = resolve_timeout(s, requested)
    assert (got, bool(warnings)) == (timeout, warned)


@pytest.mark.parametrize(
    ("requested", "timeout"), [(None, 600), (0, 0), (30, 30), (7 * 86_400, 7 * 86_400)]
)
def test_a_maximum_of_zero_is_no_bound_and_zero_is_no_deadline(
    requested: int | None, timeout: int
) -> None:
    s = Settings(subagents={"max_run_timeout_seconds": 0})  # type: ignore[arg-type]
    assert resolve_timeout(s, requested) == (timeout, [])


def _record(*, timeout_s: int) -> RunRecord:
    thread = ThreadRef(platform="slack", account="T", chat="C", thread="1.0")
    return RunRecord(
        run_id="r", seq=1, session_key="s", child_session_key="c", session_id="i",
        thread=thread, requester="slack:U", agent_id="main", subagent_type="general-purpose",
        task="t", model="m", timeout_s=timeout_s,
    )  # fmt: skip


def test_a_run_without_a_deadline_has_none_anywhere() -> None:
    s = Settings()
    none, timed = _record(timeout_s=0), _record(timeout_s=60)
    assert none.deadline_after(100.0) is None and timed.deadline_after(100.0) == 160.0
    assert not none.past_deadline(10**9) and timed.past_deadline(60) and not timed.past_deadline(59)
    assert slot_job(s, none, run_id="r", description="d").timeout == -1  # RQ: no limit
    grace = s.subagents.job_grace_seconds
    assert slot_job(s, timed, run_id="r", description="d").timeout == 60 + grace


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize(
    ("answer", "value", "problem"),
    [
        ('{"n": 1}', {"n": 1}, None),
        ('Sure:\n```json\n{"n": 2}\n```\nDone.', {"n": 2}, None),
        ('```\n{"n": 3}\n```', {"n": 3}, None),
        ('{"n": "x"}', None, "does not match the schema: n: 'x' is not of type 'integer'"),
        ("{}", None, "'n' is a required property"),
        ("no json here", None, "not valid JSON"),
        ("", None, "the answer is empty"),
    ],
)
def test_structured_check(answer: str, value: Any, problem: str | None) -> None:
    checked = structured.check(SCHEMA, answer)
    assert checked.value == value
    assert (checked.problem is None) == (problem is None)
    if problem is not None:
        assert problem in str(checked.problem)


def test_structured_normalized_and_correction() -> None:
    assert structured.normalized({"b": "ü", "a": [1, 2]}) == '{"b": "ü", "a": [1, 2]}'
    assert "n: wrong" in structured.correction("n: wrong")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"city": "Oslo", "tags": ["a", "b"]}', '- city: Oslo\n- tags: ["a", "b"]'),
        ('["x", 2]', "- x\n- 2"),
        ('"just text"', "just text"),
        ('[{"a": 1}]', '```json\n[\n  {\n    "a": 1\n  }\n]\n```'),
        ("not json", None),
    ],
)
def test_render_structured(text: str, shown: str | None) -> None:
    assert render_structured(text) == shown


def test_fork_messages_keep_the_newest_conversation_within_bounds() -> None:
    history = [
        {"role": "user", "content": "old " * 10},
        {"role": "assistant", "content": "a1"},
        {"role": "tool", "content": "skipped"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2", "ts": 1},
    ]
    assert fork_messages(history, max_messages=3) == [
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "a2"},
    ]
    assert [m["content"] for m in fork_messages(history, max_chars=10)] == ["a1", "u2", "a2"]
    [newest] = fork_messages([{"role": "user", "content": "x" * 500}], max_chars=100)
    assert len(newest["content"]) < 200 and newest["content"].startswith("x" * 50)


class LangChainLike:
    def __init__(self) -> None:
        self.type = "ai"
        self.content = [{"type": "text", "text": "hi "}, "there"]
        self.tool_calls = [{"name": "web_fetch", "args": {"url": "u"}, "id": "c1"}]
        self.usage_metadata = {"input_tokens": 4, "output_tokens": 2}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"role": "assistant", "content": "a"}, {"role": "assistant", "content": "a"}),
        ({"type": "human", "content": "q"}, {"role": "user", "content": "q"}),
        ("bare", {"role": "assistant", "content": "bare"}),
        (
            LangChainLike(),
            {
                "role": "assistant",
                "content": "hi there",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "web_fetch", "arguments": '{"url": "u"}'},
                    }
                ],
            },
        ),
    ],
)
def test_compiled_messages_become_transcript_dicts(item: Any, message: dict[str, Any]) -> None:
    assert compiled.to_message(item) == message


def test_compiled_usage_and_contract() -> None:
    assert compiled.usage_of(LangChainLike()) == Usage(prompt_tokens=4, completion_tokens=2)
    assert compiled.usage_of({"role": "assistant"}) == Usage()
    assert compiled.result_text({"messages": [{"role": "ai", "content": "r"}]}, ref="m:f") == "r"
    for state in (None, {"answer": 1}, {"messages": []}, [1]):
        with pytest.raises(RunFailed, match="must return or yield a state"):
            compiled.result_text(state, ref="m:f")
