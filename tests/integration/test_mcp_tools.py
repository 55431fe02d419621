"""MCP tools against real MCP servers built with the official SDK, over stdio and HTTP.

Each failure the model can meet is here: an error result, a hung tool (bounded by the
server's timeout; the next call works), a server that exits mid-call (the next call
reconnects), servers that cannot be reached or hang at start (not offered, no hang). The
fork tests prove that a forked process (an RQ work horse) never uses its parent's
connections and that a process that dies takes its stdio servers with it; the last test
has a real ``fanbot worker`` call a tool for a scripted model.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from bot.agent.context import ToolContext
from bot.agent.tools import Tool, execute_tool
from bot.agent.tools.mcp import McpCall, McpPool, mcp_tools
from bot.config import McpServer, Settings
from bot.deps import Deps
from bot.testing.netutil import free_port
from bot.types import ThreadRef
from tests.mcp_servers import CALC

TIMEOUT = 4.0
CALC_TOOLS = {"add", "fail", "hang", "block", "die", "pid", "odd_name"}
FORK = multiprocessing.get_context("fork")
# RQ forks its work horses the same way; Python 3.12+ warns about forking with threads.
forks = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


def settings(**servers: dict[str, Any]) -> Settings:
    return Settings(mcp={"servers": servers})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def http_calc() -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen([*CALC, "--http", str(port)], stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, deadline=time.monotonic() + 20)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait()


def _wait_for_port(port: int, *, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the MCP HTTP server did not listen on {port}")


@pytest.fixture(scope="module")
def tools(http_calc: str) -> Iterator[dict[str, Tool]]:
    web = {"url": http_calc, "headers": {"X-Test": "1"}, "tools": ["add", "fail", "hang"]}
    configured = settings(
        calc={"command": CALC, "timeout_seconds": TIMEOUT},
        web={**web, "timeout_seconds": TIMEOUT},
    )
    pool = McpPool()
    yield {t.name: t for t in mcp_tools(configured, pool)}
    pool.close()


@pytest.fixture
def ctx(redis_url: str) -> Iterator[ToolContext]:
    deps = Deps.build(Settings(redis_url=redis_url))
    thread = ThreadRef(platform="console", account="a", chat="c", thread="t")
    yield ToolContext(
        deps=deps, session_key="s", thread=thread, requester="console:u", agent_id="main"
    )
    deps.close()


def call(tools: dict[str, Tool], ctx: ToolContext | None, name: str, **args: Any) -> str:
    arguments = json.dumps(args)
    return execute_tool(tools, name=name, arguments=arguments, ctx=ctx, max_chars=10_000)  # type: ignore[arg-type]


def test_tools_are_offered_as_server__tool_with_the_servers_schema(tools: dict[str, Tool]) -> None:
    assert set(tools) == {f"calc__{t}" for t in CALC_TOOLS} | {"web__add", "web__fail", "web__hang"}
    schema = tools["calc__add"].schema()["function"]
    assert schema["description"] == "Add two integers."
    assert schema["parameters"]["required"] == ["a", "b"]
    assert schema["parameters"]["properties"]["a"]["type"] == "integer"
    # an MCP server is outside: the loop hands its results to the model as untrusted data
    assert all(t.untrusted_output for t in tools.values())


@pytest.mark.parametrize("server", ["calc", "web"])
def test_a_call_returns_the_servers_text(
    tools: dict[str, Tool], ctx: ToolContext, server: str
) -> None:
    assert call(tools, ctx, f"{server}__add", a=2, b=3) == "5"
    assert call(tools, ctx, "calc__odd_name") == "odd"


def test_arguments_are_checked_against_the_servers_schema(tools: dict[str, Tool]) -> None:
    out = call(tools, None, "calc__add", a="two", b=3)
    assert out == "error: invalid arguments for calc__add: a: 'two' is not of type 'integer'"


@pytest.mark.parametrize("server", ["calc", "web"])
def test_an_error_result_is_the_servers_text(tools: dict[str, Tool], server: str) -> None:
    out = call(tools, None, f"{server}__fail", reason="no")
    assert out == "error: Error executing tool fail: cannot do that: no"


@pytest.mark.parametrize("server", ["calc", "web"])
def test_a_hung_tool_is_bounded_and_the_next_call_works(
    tools: dict[str, Tool], server: str
) -> None:
    started = time.monotonic()
    out = call(tools, None, f"{server}__hang")
    took = time.monotonic() - started
    assert out == f"error: {server} did not answer in 4s"
    assert TIMEOUT <= took < TIMEOUT + 2
    assert call(tools, None, f"{server}__add", a=2, b=3) == "5"


def test_a_server_that_dies_mid_call_is_reconnected_by_the_next_call(
    tools: dict[str, Tool],
) -> None:
    first = call(tools, None, "calc__pid")
    assert call(tools, None, "calc__die") == "error: calc closed the connection during the call"
    assert call(tools, None, "calc__add", a=2, b=3) == "5"
    assert call(tools, None, "calc__pid") != first


def test_servers_that_cannot_be_reached_are_not_offered_and_do_not_hang(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = settings(
        closed={"url": f"http://127.0.0.1:{free_port()}/mcp"},
        missing={"command": ["/nonexistent/mcp-server"]},
        exits={"command": [sys.executable, "-c", "pass"]},
        stuck={"command": [*CALC, "--hang-at-start"], "start_timeout_seconds": 1.5},
    )
    pool = McpPool()
    with caplog.at_level(logging.WARNING, logger="bot.agent.tools.mcp_clients"):
        started = time.monotonic()
        assert mcp_tools(broken, pool) == []
        assert time.monotonic() - started < 1.5 + 2
        started = time.monotonic()
        assert mcp_tools(broken, pool) == []  # not retried at once: no wait, no second warning
        assert time.monotonic() - started < 0.5
    pool.close()
    warnings = sorted(r.getMessage() for r in caplog.records)
    assert len(warnings) == 4
    assert warnings[0].startswith("MCP server closed is not reachable: ConnectError")
    assert warnings[1].startswith("MCP server exits is not reachable: MCPError: Connection closed")
    assert warnings[2] == (
        "MCP server missing is not reachable: command '/nonexistent/mcp-server' not found; "
        "its tools are not offered"
    )
    assert warnings[3] == "MCP server stuck did not start in 1.5s; its tools are not offered"


def test_a_slow_start_is_bounded_by_the_start_timeout_not_the_call_timeout() -> None:
    slow = McpServer(
        command=[*CALC, "--start-delay", "2"], timeout_seconds=1, start_timeout_seconds=30
    )
    pool = McpPool()
    tools = {
        "slow__add": Tool(
            name="slow__add", description="", run=McpCall("slow", slow, "add", pool), schema_json={}
        )
    }
    try:
        assert call(tools, None, "slow__add", a=2, b=3) == "5"
    finally:
        pool.close()


def test_a_call_to_a_server_that_cannot_start_says_so() -> None:
    pool = McpPool()
    run = McpCall("calc", McpServer(command=["/nonexistent/mcp-server"]), "add", pool)
    tools = {"calc__add": Tool(name="calc__add", description="", run=run, schema_json={})}
    out = call(tools, None, "calc__add")
    pool.close()
    assert out == "error: calc is not reachable: command '/nonexistent/mcp-server' not found"


def _in_child(tools: dict[str, Tool], results: Any) -> None:
    results.put((call(tools, None, "calc__add", a=2, b=3), call(tools, None, "calc__pid")))


@forks
def test_a_forked_child_never_uses_its_parents_connection(tools: dict[str, Tool]) -> None:
    parents_server = call(tools, None, "calc__pid")
    results = FORK.Queue()
    child = FORK.Process(target=_in_child, args=(tools, results))
    child.start()
    added, childs_server = results.get(timeout=20)
    child.join(10)
    assert added == "5"
    assert childs_server != parents_server
    assert call(tools, None, "calc__pid") == parents_server  # the parent's is untouched


def _block_then_die(results: Any) -> None:
    configured = settings(calc={"command": CALC, "timeout_seconds": 30})
    tools = {t.name: t for t in mcp_tools(configured, McpPool())}
    results.put(call(tools, None, "calc__pid"))
    threading.Thread(target=call, args=(tools, None, "calc__block"), daemon=True).start()
    time.sleep(0.3)
    os._exit(0)  # as an RQ work horse ends: no atexit, no cleanup


@forks
def test_a_process_that_dies_takes_its_stdio_server_with_it() -> None:
    results = FORK.Queue()
    child = FORK.Process(target=_block_then_die, args=(results,))
    child.start()
    server = psutil.Process(int(results.get(timeout=20)))
    child.join(10)
    # The server is blocked in a tool, so it never reads the end of its stdin.
    deadline = time.monotonic() + 5
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.e2e
async def test_a_worker_runs_an_mcp_tool_for_the_model(redis_url: str) -> None:
    from bot.testing import FakeOpenAI, MemoryChannel, ScriptedModel, Stack, Text, ToolCalls
    from bot.testing.scripted import Call, ChatRequest
    from tests.e2e.conftest import stack_values

    def main(req: ChatRequest) -> Text | ToolCalls:
        if req.last_role == "tool":
            return Text(f"the sum is {req.tool_results[-1].content}")
        return ToolCalls([Call("calc__add", {"a": 2, "b": 3})])

    model = ScriptedModel().on(lambda r: r.has_tool("calc__add"), main)
    mcp = {"servers": {"calc": {"command": CALC, "timeout_seconds": 20}}}
    async with FakeOpenAI(model, models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url, mcp=mcp)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            await channel.say("what is 2+3?")
            await stack.wait_for(lambda: bool(channel.replies), timeout=30)
    # the model saw the server's answer marked as data from outside
    assert channel.replies[0].text == 'the sum is <untrusted source="calc__add">\n5\n</untrusted>'
