"""Log the nio client in, reusing the device saved in the store path.

Order: a configured access token (``whoami`` tells the device); else the token a
previous password login saved; else a password login that asks the server for the saved
device id again, so the bot stays one device across restarts (and keeps its encryption
identity).
"""

from __future__ import annotations

import logging

from nio import AsyncClient, LoginResponse, WhoamiResponse

from adapters.matrix.state import SessionFile, SessionState
from bot.config import MatrixSettings
from bot.errors import ConfigError

log = logging.getLogger(__name__)


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
