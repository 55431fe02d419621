"""The Matrix login and sync position, persisted in the store path.

A restart reuses the device (no new device per start, and the encryption store stays
valid for it) and continues from the saved sync token (no replay of old messages). The
file holds an access token when the bot logged in with a password, so it is written with
mode 0600 and replaced atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

FILE_NAME = "session.json"


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """What survives a restart.

    Attributes:
        homeserver: The server the login belongs to (a different one starts afresh).
        user_id: The bot's full Matrix id.
        device_id: The device the login created.
        access_token: Only for password logins; a configured token is never written.
        next_batch: The sync token after the last fully handled sync.
    """

    homeserver: str
    user_id: str
    device_id: str = ""
    access_token: str = ""
    next_batch: str = ""

    def with_batch(self, next_batch: str) -> SessionState:
        return replace(self, next_batch=next_batch)


class SessionFile:
    """Load and save :class:`SessionState` as JSON in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / FILE_NAME

    def load(self, *, homeserver: str, user_id: str) -> SessionState | None:
        """The saved state for this server and user, or ``None``."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        if data.get("homeserver") != homeserver or data.get("user_id") != user_id:
            return None
        fields = SessionState.__dataclass_fields__
        return SessionState(**{k: str(v) for k, v in data.items() if k in fields})

    def save(self, state: SessionState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(state), handle)
        os.replace(tmp, self.path)
