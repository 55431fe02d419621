"""What a worker keeps warm for its jobs, handed to each job explicitly.

The launcher builds one :class:`WorkerContext` (the stores, the model client, the MCP
connections) and warms it up before it forks its workers; each worker hands it to RQ's
worker object, which sets it as the *serving* context around every job it performs (in
the forked work horse, which inherits it). A job function takes JSON arguments only, so
it finds the context through :func:`current`: a context variable, never a module global,
so two runs served by one process on two threads each see their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from bot.agent.router import ModelRouter
from bot.agent.tools.mcp import McpPool
from bot.config import Settings
from bot.deps import Deps
from bot.models.completion import ChatModel
from bot.redis.connect import connect

_serving: ContextVar[WorkerContext | None] = ContextVar("fanbot_worker_context", default=None)


@dataclass(frozen=True, kw_only=True, eq=False)
class WorkerContext:
    """What a job needs, built once per worker.

    Attributes:
        deps: The stores and settings.
        model: The model client: every endpoint's, each built on its first call (its TLS
            set-up alone costs a few hundred ms per build).
        mcp: This process's MCP connections (each forked child opens its own).
        closing: Closes what :meth:`build` built, last built first.
    """

    deps: Deps
    model: ChatModel
    mcp: McpPool
    closing: ExitStack = field(default_factory=ExitStack)

    @classmethod
    def build(cls, settings: Settings) -> WorkerContext:
        """The stores, the model client and an MCP pool for ``settings``."""
        closing = ExitStack()
        deps = Deps.build(settings, client=connect(settings.redis_url,
                                                   max_connections=redis_connections(settings)))  # fmt: skip
        closing.callback(deps.close)
        model = ModelRouter(settings, limits=deps.model_limits)
        closing.callback(model.close)
        mcp = McpPool()
        closing.callback(mcp.close)
        return cls(deps=deps, model=model, mcp=mcp, closing=closing)

    def close(self) -> None:
        self.closing.close()


CONNECTIONS_PER_RUN = 3
"""A threads-pool run's thread, its stall watch and RQ's bookkeeping of it may each hold a
Redis connection at once."""


def redis_connections(settings: Settings) -> int | None:
    """The bound of a worker process's Redis pool: every run of a threads-pool process
    shares it (and RQ's dequeuers and heartbeats), so it is sized to them; None (redis-py's
    default) for a fork-pool worker, one run per process."""
    if settings.workers.pool != "threads":
        return None
    return settings.workers.concurrency * CONNECTIONS_PER_RUN + 32


def current() -> WorkerContext | None:
    """The context serving the job that runs in this thread, if a worker set one."""
    return _serving.get()


@contextmanager
def serving(context: WorkerContext) -> Iterator[WorkerContext]:
    """Make ``context`` the one :func:`current` returns in this thread, for the block."""
    token = _serving.set(context)
    try:
        yield context
    finally:
        _serving.reset(token)
