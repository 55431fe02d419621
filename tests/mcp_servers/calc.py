"""A small MCP server for the tests, built with the official SDK.

Run over stdio (``python tests/mcp_servers/calc.py``) or streamable HTTP
(``python tests/mcp_servers/calc.py --http PORT``, endpoint ``/mcp``). ``--hang-at-start``
makes it sleep before it serves, like a server stuck starting.

Tools: ``add`` (the happy path), ``fail`` (an error result), ``hang`` (never answers, but
the server stays responsive), ``block`` (never answers and blocks the whole server),
``die`` (the process exits mid-call), ``pid`` (the server's process id) and ``odd.name``
(a name the model's tool-name pattern does not allow).
"""

from __future__ import annotations

import argparse
import os
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("calc", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str = "it broke") -> str:
    """Always fails, with the reason as the error text."""
    raise ToolError(f"cannot do that: {reason}")


@server.tool()
async def hang() -> str:
    """Never answers (the server keeps serving other requests)."""
    await anyio.sleep(3600)
    return "woke up"


@server.tool()
def block() -> str:
    """Never answers, and blocks the whole server while it waits."""
    time.sleep(3600)
    return "woke up"


@server.tool()
def die() -> str:
    """Exits the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool(name="odd.name")
def odd_name() -> str:
    """A tool whose name has a dot."""
    return "odd"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument("--hang-at-start", action="store_true")
    parser.add_argument("--start-delay", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    time.sleep(args.start_delay)
    if args.hang_at_start:
        time.sleep(3600)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
