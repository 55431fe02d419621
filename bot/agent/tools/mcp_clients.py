"""One process's MCP clients: a blocking API over the bridge's loop, with bounded waits.

:class:`McpClients` keeps one connection per configured server (keyed by its whole
configuration, so changed settings get a new connection), lists each server's tools once,
and turns every failure into a :class:`~bot.errors.ToolError` whose text the model reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError

from bot.agent.tools.mcp_bridge import Connection, LoopThread, Unreachable, describe
from bot.config import McpServer
from bot.errors import ToolError

log = logging.getLogger(__name__)

RELIST_AFTER = 60.0  # a server that could not be listed is tried again after this
MAX_PAGES = 50
SYNC_GRACE = 5.0  # the blocking side waits this much past the loop side's own bound


@dataclass(frozen=True, kw_only=True)
class _Listing:
    tools: tuple[types.Tool, ...] | None  # None: the server could not be listed
    at: float


def server_key(name: str, server: McpServer) -> str:
    """Identifies a server's whole configuration (secrets included, hence hashed)."""
    data = server.model_dump(mode="json")
    data["env"] = {k: v.get_secret_value() for k, v in server.env.items()}
    data["headers"] = {k: v.get_secret_value() for k, v in server.headers.items()}
    blob = json.dumps([name, data], sort_keys=True).encode()
    return f"{name}:{hashlib.sha256(blob).hexdigest()[:16]}"


class McpClients:
    """Connections to MCP servers from this process (create one per process, after fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._loop = LoopThread()
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._listings: dict[str, _Listing] = {}
        self._warned: set[str] = set()

    def list_tools(self, servers: Mapping[str, McpServer]) -> dict[str, tuple[types.Tool, ...]]:
        """Each reachable server's tools, listed in parallel, each within its timeout."""
        now = time.monotonic()
        due = {n: s for n, s in servers.items() if self._due(server_key(n, s), now)}
        if due:
            bound = max(_loop_bound(s) for s in due.values()) + SYNC_GRACE
            try:
                found = self._loop.run(self._list_all(due), timeout=bound)
            except TimeoutError as exc:  # only if the loop itself is stuck
                found = dict.fromkeys(due, exc)
            for name, tools in found.items():
                self._record(name, due[name], tools, now)
        listings = {n: self._listings[server_key(n, s)].tools for n, s in servers.items()}
        return {name: tools for name, tools in listings.items() if tools is not None}

    def call(self, name: str, server: McpServer, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` on the server and return its text.

        Raises:
            ToolError: Unreachable server, timeout, error result, or a server that exited.
        """
        coro = self._call(name, server, tool, arguments)
        try:
            result = self._loop.run(coro, timeout=_loop_bound(server) + SYNC_GRACE)
        except TimeoutError:  # only if the loop itself is stuck; _call bounds itself
            raise ToolError(f"{name} {_no_answer(server)}") from None
        return render(result)

    def close(self, *, timeout: float) -> None:
        """Close every connection (waiting at most ``timeout``) and stop the loop."""
        with contextlib.suppress(TimeoutError):
            self._loop.run(self._close_all(timeout), timeout=timeout + 1)
        self._loop.stop(timeout=1.0)

    def _due(self, key: str, now: float) -> bool:
        listing = self._listings.get(key)
        return listing is None or (listing.tools is None and now - listing.at >= RELIST_AFTER)

    def _record(self, name: str, server: McpServer, tools: Any, now: float) -> None:
        key = server_key(name, server)
        if isinstance(tools, BaseException):
            level = logging.DEBUG if key in self._warned else logging.WARNING
            self._warned.add(key)
            log.log(
                level, "MCP server %s %s; its tools are not offered", name, _problem(tools, server)
            )
            tools = None
        self._listings[key] = _Listing(tools=tools, at=now)

    async def _list_all(self, servers: Mapping[str, McpServer]) -> dict[str, Any]:
        jobs = [self._list(name, server) for name, server in servers.items()]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        return dict(zip(servers, results, strict=True))

    async def _list(self, name: str, server: McpServer) -> tuple[types.Tool, ...]:
        key = server_key(name, server)
        try:
            session = await self._started(key, name, server)
            with anyio.fail_after(server.timeout_seconds):
                return await _all_tools(session)
        except BaseException:
            self._reset(key)
            raise

    async def _call(
        self, name: str, server: McpServer, tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        key = server_key(name, server)
        try:
            session = await self._started(key, name, server)
            with anyio.fail_after(server.timeout_seconds):
                return await session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:
                raise ToolError(f"{name}: {exc.message}") from None
            self._reset(key)
            raise ToolError(f"{name} closed the connection during the call") from None
        except Exception as exc:
            self._reset(key)
            raise ToolError(f"{name} {_problem(exc, server)}") from None

    async def _started(self, key: str, name: str, server: McpServer) -> ClientSession:
        """The server's session, started (and initialized) within ``start_timeout_seconds``."""
        try:
            with anyio.fail_after(server.start_timeout_seconds):
                return await self._session(key, name, server)
        except TimeoutError:
            raise NotStarted(server.start_timeout_seconds) from None

    async def _session(self, key: str, name: str, server: McpServer) -> ClientSession:
        async with self._locks.setdefault(key, asyncio.Lock()):
            connection = self._connections.get(key)
            if connection is not None and connection.usable and connection.session is not None:
                return connection.session
            self._reset(key)  # gone, e.g. the server exited: reconnect, once
            connection = self._connections[key] = Connection(name=name, server=server)
            return await connection.open()

    def _reset(self, key: str) -> None:
        connection = self._connections.pop(key, None)
        if connection is not None:
            connection.close()

    async def _close_all(self, timeout: float) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        with anyio.move_on_after(timeout):
            for connection in connections:
                await connection.ended()


async def _all_tools(session: ClientSession) -> tuple[types.Tool, ...]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)


def _loop_bound(server: McpServer) -> float:
    """The longest the loop side may take on its own: a start (the first call, or after a
    reset) within ``start_timeout_seconds``, then the request within ``timeout_seconds``."""
    return server.start_timeout_seconds + server.timeout_seconds


def _no_answer(server: McpServer) -> str:
    return f"did not answer in {server.timeout_seconds:g}s"


class NotStarted(Exception):
    """The server did not start (or answer ``initialize``) within its start timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not start in {seconds:g}s")


def _problem(exc: BaseException, server: McpServer) -> str:
    """What went wrong, said after the server's name."""
    if isinstance(exc, NotStarted):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return _no_answer(server)
    if isinstance(exc, Unreachable):
        return f"is not reachable: {exc}"
    return f"failed: {describe(exc)}"


def render(result: types.CallToolResult) -> str:
    """The text of a tool result; an error result raises :class:`ToolError` with its text."""
    text = "\n".join(part for part in map(_block_text, result.content) if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:
        raise ToolError(text or "the tool reported an error without a message")
    return text or "(no output)"


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource: {block.uri}]"
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        if isinstance(inner, types.TextResourceContents):
            return inner.text
        return f"[resource: {inner.uri} ({inner.mime_type or 'binary'})]"
    return f"[{getattr(block, 'type', 'content')}]"
