"""The tools of MCP servers, offered to the agents as ``<server>__<tool>``.

Servers are configured in ``FANBOT_MCP__SERVERS`` (:class:`bot.config.McpServer`): a
``command`` run as a stdio subprocess, or a streamable-HTTP ``url``. A tool's parameters
are the server's own JSON schema; its arguments are checked against it and passed through.

Tools run synchronously in an RQ work horse. An :class:`McpPool` (the worker context owns
one) gives each process its own :class:`~bot.agent.tools.mcp_clients.McpClients` (one
private event loop thread, one connection per server, each server's tool list fetched
once), created on first use. A forked child never touches its parent's: their threads,
subprocesses and sockets are not its own, so it creates fresh ones. They are closed at
exit; a work horse that ends in ``os._exit`` or a SIGKILL takes its stdio servers with it
(see :mod:`bot.agent.tools.mcp_bridge`).

What the model reads when something goes wrong (``error: …``):

* a server that cannot be reached, or hangs, while listing: its tools are simply not
  offered (one warning per process; listing is retried a minute later); at call time:
  ``<server> is not reachable: <why>``;
* an ``isError`` result: the server's own text;
* not started (connected and initialized) within ``start_timeout_seconds``:
  ``<server> did not start in 60s``;
* no answer within ``timeout_seconds``: ``<server> did not answer in 30s``; the connection
  is reset (a stdio server is stopped) and the next call reconnects;
* a server that exits during a call: ``<server> closed the connection during the call``;
  one that exited between calls is reconnected by the next call.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.agent.tools import Tool
from bot.agent.tools.json_schema import invalid_schema
from bot.config import McpServer, Settings

if TYPE_CHECKING:
    from mcp import types

    from bot.agent.context import ToolContext
    from bot.agent.tools.mcp_clients import McpClients

log = logging.getLogger(__name__)

MAX_NAME = 64  # the model's tool names: ^[a-zA-Z0-9_-]{1,64}$
MAX_DESCRIPTION = 1024
CLOSE_TIMEOUT = 5.0
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")


def mcp_tools(settings: Settings, pool: McpPool) -> list[Tool]:
    """The tools of every configured MCP server that answers (a catalog family)."""
    servers = settings.mcp.servers
    if not servers:
        return []
    listed = pool.clients().list_tools(servers)
    return [
        t for name, tools in listed.items() for t in server_tools(name, servers[name], tools, pool)
    ]


def server_tools(
    name: str, server: McpServer, tools: Sequence[types.Tool], pool: McpPool
) -> list[Tool]:
    """One server's tools as fanbot tools: its allow list applied, names fitted."""
    wanted = [t for t in tools if not server.tools or t.name in server.tools]
    names = model_names(name, [t.name for t in wanted])
    built = (_tool(names[t.name], name, server, t, pool) for t in wanted)
    return [tool for tool in built if tool is not None]


@dataclass(frozen=True, eq=False)
class McpCall:
    """``Tool.run`` of one MCP tool; it uses the calling process's clients (fork-safe)."""

    server_name: str
    server: McpServer
    tool: str
    pool: McpPool

    def __call__(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        return self.pool.clients().call(self.server_name, self.server, self.tool, args)


def _tool(
    model_name: str, server_name: str, server: McpServer, tool: types.Tool, pool: McpPool
) -> Tool | None:
    schema = {"properties": {}, **tool.input_schema}
    problem = invalid_schema(schema)
    if problem is None and schema.get("type") != "object":
        problem = "its input schema is not an object schema"
    if problem is not None:
        pool.warn_once(f"MCP tool {server_name}/{tool.name} not offered: {problem}")
        return None
    return Tool(
        name=model_name,
        description=(tool.description or tool.title or tool.name)[:MAX_DESCRIPTION],
        run=McpCall(server_name, server, tool.name, pool),
        schema_json=schema,
        repeat_safe=_repeat_safe(tool),
        untrusted_output=True,
    )


def _repeat_safe(tool: types.Tool) -> bool:
    """The server says the tool only reads (``readOnlyHint``) or repeats without further
    effect (``idempotentHint``): a call its lost worker left unfinished runs again."""
    hints = tool.annotations
    return hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)


def model_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """Each tool's name for the model: ``<server>__<tool>``, fitted to ``^[a-zA-Z0-9_-]{1,64}$``.

    Characters the pattern does not allow become ``_``; a name too long, or one that a
    changed name would collide with, ends in a digest of the tool's own name instead. Names
    that fit as they are never change.
    """
    chosen: dict[str, str] = {}
    taken: set[str] = set()
    for tool in sorted(set(tools), key=lambda t: (_fitted(server, t) != f"{server}__{t}", t)):
        name = _fitted(server, tool)
        if name in taken:
            name = _with_digest(name, tool)
        chosen[tool] = name
        taken.add(name)
    return chosen


def _fitted(server: str, tool: str) -> str:
    name = _NOT_ALLOWED.sub("_", f"{server}__{tool}")
    return name if len(name) <= MAX_NAME else _with_digest(name, tool)


def _with_digest(name: str, tool: str) -> str:
    return f"{name[: MAX_NAME - 7]}_{hashlib.sha256(tool.encode()).hexdigest()[:6]}"


class McpPool:
    """This process's MCP clients, created on first use and anew in a forked child.

    Built once per worker (:class:`workers.context.WorkerContext` owns it); its fork and
    exit hooks are registered here, when it is built. A parent's clients are kept
    referenced in a child, so nothing of them (threads, subprocesses) is finalized there.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._current: McpClients | None = None
        self._abandoned: list[McpClients] = []
        self._warned: set[str] = set()
        mine = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget_parent(mine))
        atexit.register(self.close)

    def clients(self) -> McpClients:
        """This process's clients (created now if there are none of its own)."""
        with self.lock:
            if self._current is None or self._current.pid != os.getpid():
                # Imported here: the SDK takes ~0.4 s to import, and only MCP users should pay.
                from bot.agent.tools.mcp_clients import McpClients

                self.forget_parent()
                self._current = McpClients()
            return self._current

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Close this process's MCP connections (stdio servers are stopped); idempotent."""
        with self.lock:
            mine, self._current = self._current, None
        if mine is not None and mine.pid == os.getpid():
            mine.close(timeout=timeout)
        elif mine is not None:
            self._abandoned.append(mine)

    def forget_parent(self) -> None:
        """Keep the clients a parent process made, without using them."""
        if self._current is not None:
            self._abandoned.append(self._current)
            self._current = None

    def warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)


def _forget_parent(pool: weakref.ref[McpPool]) -> None:
    found = pool()
    if found is not None:
        found.lock = threading.Lock()  # another thread may have held it at the fork
        found.forget_parent()
