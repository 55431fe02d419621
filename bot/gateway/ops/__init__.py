"""The ops page: runs of every thread, queues, workers and dead letters, on the gateway.

Served at ``/ops`` on the gateway's HTTP port when ``FANBOT_OPS__TOKEN`` is set (else not
at all: 404). Read-only but for one action, replaying dead letters, which needs
``FANBOT_OPS__ADMIN_TOKEN``. See docs/operations.md "Ops page".

Layout: :mod:`.auth` (who may do what, pure), :mod:`.snapshot` (the reads, through the
stores), :mod:`.view` (snapshot to display rows, pure), :mod:`.templates` (HTML) and
:mod:`.handlers` (the aiohttp shell).
"""

from __future__ import annotations

from aiohttp import web

from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ops.handlers import OpsPage

__all__ = ["OpsPage", "ops_routes"]


def ops_routes(settings: Settings, deps: Deps) -> list[web.RouteDef]:
    """The page's routes; ``[]`` when ``FANBOT_OPS__TOKEN`` is unset (the page is off)."""
    if not settings.ops.enabled:
        return []
    return OpsPage(settings=settings.ops, deps=deps).routes()
