"""Make the nio client and log it in, reusing the device saved in the store path.

Order: a configured access token (``whoami`` tells the device); else the token a
previous password login saved; else a password login that asks the server for the saved
device id again, so the bot stays one device across restarts (and keeps its encryption
identity).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse
from nio import AsyncClient, AsyncClientConfig, LoginResponse, WhoamiResponse
from nio.store import SqliteStore

from adapters.matrix.state import SessionFile, SessionState
from bot.config import MatrixSettings
from bot.errors import ConfigError

log = logging.getLogger(__name__)


class ClientClosed(RuntimeError):
    """A request on a :class:`Client` after :meth:`Client.close`."""


class Client(AsyncClient):  # type: ignore[misc]  # nio ships no types
    """nio's client, except that a request after :meth:`close` fails at once.

    nio opens a new HTTP session for any request made without one, and its close leaves
    none: a request still retrying when the adapter stops (a send that timed out, a
    download) would open a session nobody closes and leak its connection.
    """

    closed = False

    async def close(self) -> None:
        self.closed = True
        await super().close()

    async def send(self, *args: Any, **kwargs: Any) -> ClientResponse:
        if self.closed:
            raise ClientClosed("the Matrix client is closed (the adapter stopped)")
        response: ClientResponse = await super().send(*args, **kwargs)
        return response


def make_client(settings: MatrixSettings, store_path: Path) -> Client:
    """A nio client for ``settings``; with encryption its key store lives in ``store_path``."""
    encrypted = settings.encryption
    nio_dir = store_path / "nio"
    nio_dir.mkdir(parents=True, exist_ok=True)
    config = AsyncClientConfig(
        # One 429 comes back to us as an error: the outbox owns retrying with Retry-After.
        max_limit_exceeded=0,
        # A connection that fails comes back at once too: nio would retry it twice, logging
        # "Timed out, sleeping for 0s" even for a DNS failure. The sync loop and the gateway's
        # start retry with back-off and say why in one line (docs/troubleshooting.md).
        max_timeouts=0,
        encryption_enabled=encrypted,
        store=SqliteStore,  # nio insists on a class even when encryption is off
        store_sync_tokens=False,
    )
    return Client(
        settings.homeserver or "",
        settings.user_id or "",
        store_path=str(nio_dir) if encrypted else "",
        config=config,
    )


async def login(client: AsyncClient, settings: MatrixSettings, store: SessionFile) -> SessionState:
    """Log ``client`` in and return the state to persist (with any saved sync token)."""
    homeserver = client.homeserver
    user_id = settings.user_id or ""
    saved = store.load(homeserver=homeserver, user_id=user_id)
    if settings.access_token is not None:
        token = settings.access_token.get_secret_value()
        who = await _whoami(client, token)
        if who is None:
            raise ConfigError("FANBOT_MATRIX__ACCESS_TOKEN: the homeserver rejected the token")
        device = who.device_id or (saved.device_id if saved else "")
        client.restore_login(who.user_id, device, token)
        keep = saved is not None and saved.device_id == device
        return SessionState(
            homeserver=homeserver,
            user_id=who.user_id,
            device_id=device,
            next_batch=saved.next_batch if saved and keep else "",
        )
    if saved and saved.access_token and await _whoami(client, saved.access_token):
        client.restore_login(saved.user_id, saved.device_id, saved.access_token)
        return saved
    return await _password_login(client, settings, saved)


async def _whoami(client: AsyncClient, token: str) -> WhoamiResponse | None:
    client.access_token = token
    response = await client.whoami()
    client.access_token = ""
    return response if isinstance(response, WhoamiResponse) else None


async def _password_login(
    client: AsyncClient, settings: MatrixSettings, saved: SessionState | None
) -> SessionState:
    if settings.password is None:
        raise ConfigError("FANBOT_MATRIX__PASSWORD or FANBOT_MATRIX__ACCESS_TOKEN is required")
    if saved and saved.device_id:
        client.device_id = saved.device_id
    response = await client.login(
        settings.password.get_secret_value(), device_name=settings.device_name
    )
    if not isinstance(response, LoginResponse):
        raise ConfigError(f"matrix login as {settings.user_id} failed: {response}")
    log.info("matrix: logged in as %s (device %s)", response.user_id, response.device_id)
    same_device = saved is not None and saved.device_id == response.device_id
    return SessionState(
        homeserver=client.homeserver,
        user_id=response.user_id,
        device_id=response.device_id,
        access_token=response.access_token,
        next_batch=saved.next_batch if saved and same_device else "",
    )
