"""The pure parts of the MCP tools: names, settings, schemas passed through, results as text.

The MCP servers themselves are exercised in ``tests/integration/test_mcp_tools.py``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from bot.agent.tools import Tool, execute_tool
from bot.agent.tools.mcp import McpPool, model_names, server_tools
from bot.agent.tools.mcp_clients import render
from bot.config import McpServer, Settings, load_settings
from bot.errors import ConfigError, ToolError

MODEL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (["add"], {"add": "calc__add"}),
        (["odd.name", "odd name"], {"odd name": "calc__odd_name", "odd.name": None}),
        (["a_b", "a.b"], {"a_b": "calc__a_b", "a.b": None}),  # the valid name keeps its own
        (["x" * 70], {"x" * 70: None}),
    ],
)
def test_model_names_fit_the_pattern_and_never_collide(
    tools: list[str], expected: dict[str, str | None]
) -> None:
    names = model_names("calc", tools)
    assert all(MODEL_NAME.fullmatch(n) for n in names.values())
    assert len(set(names.values())) == len(tools)
    for tool, name in expected.items():
        if name is not None:
            assert names[tool] == name
        else:  # changed and disambiguated with a digest of the tool's own name
            assert re.fullmatch(r"calc__[a-zA-Z0-9_-]+_[0-9a-f]{6}", names[tool])
    assert model_names("calc", reversed(tools)) == names  # stable across processes


def _listed(name: str, schema: dict[str, Any]) -> types.Tool:
    return types.Tool(name=name, description=f"{name} things", input_schema=schema)


def test_a_servers_tools_honour_its_allow_list_and_skip_unusable_schemas() -> None:
    server = McpServer(command=["srv"], tools=["add", "bad", "scalar"])
    listed = [
        _listed("add", {"type": "object", "properties": {"a": {"type": "integer"}}}),
        _listed("sub", {"type": "object"}),
        _listed("bad", {"type": "objekt"}),
        _listed("scalar", {"type": "string"}),
    ]
    tools = server_tools("calc", server, listed, McpPool())
    assert [t.name for t in tools] == ["calc__add"]
    assert tools[0].schema()["function"]["parameters"]["properties"] == {"a": {"type": "integer"}}


def _echo(schema: dict[str, Any]) -> dict[str, Tool]:
    def run(ctx: Any, args: dict[str, Any]) -> str:
        return repr(args)

    return {"t": Tool(name="t", description="", run=run, schema_json=schema)}


@pytest.mark.parametrize(
    ("schema", "arguments", "expected"),
    [
        ({"type": "object", "required": ["a"]}, '{"a": 1}', "{'a': 1}"),
        ({"type": "object", "required": ["a"]}, "{}", "error: invalid arguments for t: "),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "object", "properties": {"m": {"type": "integer"}}}},
            },
            '{"n": {"m": "x"}}',
            "error: invalid arguments for t: n.m: 'x' is not of type 'integer'",
        ),
        ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, '{"a": 1}', "{'a': 1}"),
    ],
)
def test_a_json_schema_tool_checks_and_passes_its_arguments_through(
    schema: dict[str, Any], arguments: str, expected: str
) -> None:
    out = execute_tool(_echo(schema), name="t", arguments=arguments, ctx=None, max_chars=500)  # type: ignore[arg-type]
    assert out.startswith(expected)


@pytest.mark.parametrize(
    ("content", "structured", "expected"),
    [
        ([types.TextContent(text="5")], {"result": 5}, "5"),
        ([], {"result": 5}, '{"result": 5}'),
        ([], None, "(no output)"),
        (
            [
                types.TextContent(text="see"),
                types.ImageContent(data="aGVsbG8h", mime_type="image/png"),
                types.ResourceLink(name="r", uri="file:///r.txt"),
                types.EmbeddedResource(
                    resource=types.TextResourceContents(uri="file:///a", text="inline")
                ),
            ],
            None,
            "see\n[image: image/png, 6 bytes]\n[resource: file:///r.txt]\ninline",
        ),
    ],
)
def test_results_become_text(content: list[Any], structured: Any, expected: str) -> None:
    result = types.CallToolResult(content=content, structured_content=structured)
    assert render(result) == expected


def test_an_error_result_raises_its_text() -> None:
    result = types.CallToolResult(content=[types.TextContent(text="no such file")], is_error=True)
    with pytest.raises(ToolError, match=r"^no such file$"):
        render(result)


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ({}, "set either command (stdio) or url (streamable HTTP)"),
        ({"command": ["x"], "url": "http://h/mcp"}, "set either command"),
        ({"url": "http://h/mcp", "env": {"A": "1"}}, "env is for a command (stdio) server"),
        ({"command": ["x"], "headers": {"A": "1"}}, "headers are for a url (HTTP) server"),
        ({"url": "ftp://h/mcp"}, "String should match pattern"),
        ({"command": ["x"], "timeout_seconds": 0}, "greater than 0"),
        ({"command": ["x"], "tool": ["a"]}, "Extra inputs are not permitted"),
    ],
)
def test_a_server_is_stdio_or_http(server: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        McpServer(**server)


@pytest.mark.parametrize("name", ["a__b", "-x", "x" * 33, "a.b"])
def test_server_names_fit_into_tool_names(name: str) -> None:
    with pytest.raises(ValueError, match="server name"):
        Settings(mcp={"servers": {name: {"command": ["x"]}}})  # type: ignore[arg-type]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_servers_from_the_environment(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    monkeypatch.setenv(
        "FANBOT_MCP__SERVERS",
        '{"calc": {"command": ["python", "calc.py"], "env": {"TOKEN": "t"}, "tools": ["add"]},'
        ' "docs": {"url": "https://docs.example/mcp", "headers": {"Authorization": "Bearer b"}}}',
    )
    servers = load_settings().mcp.servers
    assert servers["calc"].command == ["python", "calc.py"]
    assert servers["calc"].env["TOKEN"].get_secret_value() == "t"
    assert servers["calc"].timeout_seconds == 30
    assert servers["docs"].headers["Authorization"].get_secret_value() == "Bearer b"
    assert "Bearer" not in repr(servers)


def test_credentials_stay_out_of_the_file(monkeypatch: pytest.MonkeyPatch, clean_env: Path) -> None:
    (clean_env / "fanbot.toml").write_text(
        '[mcp.servers.calc]\ncommand = ["calc"]\nenv = { TOKEN = "t" }\n'
    )
    with pytest.raises(ConfigError, match=r"sets secrets \(mcp.servers.calc.env\)"):
        load_settings()
    (clean_env / "fanbot.toml").write_text('[mcp.servers.calc]\ncommand = ["calc"]\n')
    monkeypatch.setenv("FANBOT_MCP__SERVERS__CALC__ENV", '{"TOKEN": "t"}')
    server = load_settings().mcp.servers["calc"]
    assert server.command == ["calc"] and server.env["TOKEN"].get_secret_value() == "t"


def test_an_mcp_tool_marked_read_only_or_idempotent_is_safe_to_repeat() -> None:
    """A call in flight when its worker was lost runs again only for these (bot.agent.resume)."""
    from mcp import types

    from bot.agent.tools.mcp import _repeat_safe

    def tool(**hints: bool) -> types.Tool:
        notes = types.ToolAnnotations(**hints) if hints else None
        return types.Tool(name="t", input_schema={"type": "object"}, annotations=notes)

    assert _repeat_safe(tool(read_only_hint=True))
    assert _repeat_safe(tool(idempotent_hint=True))
    assert not _repeat_safe(tool(destructive_hint=True))
    assert not _repeat_safe(tool(read_only_hint=False))
    assert not _repeat_safe(tool())
