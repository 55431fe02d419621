"""A private Synapse homeserver for tests: offline, SQLite, loopback only.

``pip install matrix-synapse`` (the ``test`` extra) provides the server. :class:`Synapse`
writes a config into a temporary directory, starts ``synapse.app.homeserver`` as a child
process, waits for ``/_matrix/client/versions`` and registers users with the shared-secret
admin API. Federation is off (no federation listener, empty domain whitelist, no trusted
key servers) so it never reaches outside the machine.

The methods block (subprocess and ``urllib``); call them from fixtures or set-up code, not
from inside a running event loop.

Example::

    with Synapse(data_dir=tmp) as hs:
        alice = hs.register("alice", "secret")
        print(hs.url, alice.access_token)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.supervise.childproc import stop_process
from bot.testing.netutil import free_port

SERVER_NAME = "localhost"

_RELAXED_RATE = {"per_second": 10_000, "burst_count": 10_000}
_RATE_LIMIT_KEYS = (
    "rc_message",
    "rc_registration",
    "rc_admin_redaction",
    "rc_3pid_validation",
    "rc_room_creation",
    "rc_reports",
    "rc_presence",
)
_NESTED_RATE_LIMITS = {
    "rc_login": ("address", "account", "failed_attempts"),
    "rc_joins": ("local", "remote"),
    "rc_joins_per_room": (),
    "rc_invites": ("per_room", "per_user", "per_issuer"),
    "rc_key_requests": (),
}


class _PortTaken(Exception):
    """Synapse exited because its port was taken meanwhile."""


@dataclass(frozen=True, kw_only=True)
class MatrixUser:
    """A registered account: full ``user_id``, its device and access token."""

    user_id: str
    localpart: str
    password: str
    access_token: str
    device_id: str


def relaxed_rate_limits() -> dict[str, Any]:
    """Synapse ``rc_*`` settings high enough that tests never hit them."""
    limits: dict[str, Any] = {key: dict(_RELAXED_RATE) for key in _RATE_LIMIT_KEYS}
    for key, parts in _NESTED_RATE_LIMITS.items():
        limits[key] = {p: dict(_RELAXED_RATE) for p in parts} if parts else dict(_RELAXED_RATE)
    limits["rc_presence"] = {"per_user": dict(_RELAXED_RATE)}
    return limits


class Synapse:
    """Start and stop a private Synapse homeserver.

    Args:
        data_dir: Directory for config, database, keys and log (created if missing).
        port: Client API port on 127.0.0.1; a free one when omitted.
        rate_limits: ``rc_*`` overrides merged over :func:`relaxed_rate_limits`; pass
            e.g. ``{"rc_message": {"per_second": 0.5, "burst_count": 2}}`` to exercise
            ``M_LIMIT_EXCEEDED``.
        extra_config: Further top-level config keys (override the defaults).
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        port: int | None = None,
        rate_limits: dict[str, Any] | None = None,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.rate_limits = {**relaxed_rate_limits(), **(rate_limits or {})}
        self.extra_config = extra_config or {}
        self.shared_secret = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "homeserver.yaml"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "homeserver.log"

    def config(self) -> dict[str, Any]:
        """The homeserver config as a dict (JSON is valid YAML, so it is written as JSON)."""
        d = self.data_dir
        config: dict[str, Any] = {
            "server_name": SERVER_NAME,
            "public_baseurl": self.url + "/",
            "pid_file": str(d / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(d / "homeserver.db")}},
            "log_config": str(d / "log.config"),
            "media_store_path": str(d / "media"),
            "signing_key_path": str(d / "signing.key"),
            "registration_shared_secret": self.shared_secret,
            "macaroon_secret_key": secrets.token_hex(16),
            "form_secret": secrets.token_hex(16),
            "report_stats": False,
            "enable_metrics": False,
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "url_preview_enabled": False,
            "enable_registration": False,
            "presence": {"enabled": False},
            **self.rate_limits,
        }
        config.update(self.extra_config)
        return config

    def write_config(self) -> None:
        from signedjson.key import generate_signing_key, write_signing_keys

        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "media").mkdir(exist_ok=True)
        key_path = self.data_dir / "signing.key"
        if not key_path.exists():
            with key_path.open("w") as handle:
                write_signing_keys(handle, [generate_signing_key("a_test")])
        self.config_path.write_text(json.dumps(self.config(), indent=2))
        (self.data_dir / "log.config").write_text(json.dumps(self._log_config(), indent=2))

    def _log_config(self) -> dict[str, Any]:
        return {
            "version": 1,
            "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
            "handlers": {
                "file": {
                    "class": "logging.FileHandler",
                    "formatter": "plain",
                    "filename": str(self.log_path),
                }
            },
            "root": {"level": "WARNING", "handlers": ["file"]},
            "disable_existing_loggers": False,
        }

    def start(self, *, timeout: float = 60.0, attempts: int = 3) -> Synapse:
        """Write the config, start the server and wait until its client API answers.

        A port taken between choosing and binding it (the free-port race) is retried
        on another port, ``attempts`` times in all.
        """
        for attempt in range(attempts):
            try:
                return self._start_once(timeout=timeout)
            except _PortTaken:
                if attempt == attempts - 1:
                    raise RuntimeError(f"synapse could not bind a port: {self._tail()}") from None
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, *, timeout: float) -> Synapse:
        self.write_config()
        self.log_path.unlink(missing_ok=True)  # a failed attempt's log must not count
        with (self.data_dir / "stdout.log").open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "synapse.app.homeserver", "-c", str(self.config_path)],
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Address already in use" in self._tail():
                # Synapse logs the bind failure but lingers for a while before exiting.
                self.stop()
                raise _PortTaken
            if self.process.poll() is not None:
                raise RuntimeError(f"synapse exited with {self.process.returncode}: {self._tail()}")
            with contextlib.suppress(OSError):
                self._request("GET", "/_matrix/client/versions", timeout=1.0)
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"synapse did not answer within {timeout}s: {self._tail()}")

    def _tail(self) -> str:
        texts = []
        for path in (self.data_dir / "stdout.log", self.log_path):
            with contextlib.suppress(OSError):
                texts.append(path.read_text()[-2000:])
        return "\n".join(texts)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s)."""
        stop_process(self.process, timeout=10)
        self.process = None

    def __enter__(self) -> Synapse:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        token: str = "",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, Any] = json.loads(response.read() or b"{}")
        return result

    def api(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, token: str = ""
    ) -> dict[str, Any]:
        """Call the client or admin API; raise ``urllib.error.HTTPError`` on an error status."""
        return self._request(method, path, body, token)

    def register(self, localpart: str, password: str = "", *, admin: bool = False) -> MatrixUser:
        """Register ``@localpart:localhost`` with the shared secret and return its login."""
        password = password or secrets.token_hex(8)
        nonce = self._request("GET", "/_synapse/admin/v1/register")["nonce"]
        message = "\x00".join([nonce, localpart, password, "admin" if admin else "notadmin"])
        mac = hmac.new(self.shared_secret.encode(), message.encode(), hashlib.sha1).hexdigest()
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac,
        }
        result = self._request("POST", "/_synapse/admin/v1/register", body)
        return MatrixUser(
            user_id=result["user_id"],
            localpart=localpart,
            password=password,
            access_token=result["access_token"],
            device_id=result["device_id"],
        )


HTTPError = urllib.error.HTTPError
"""What :meth:`Synapse.api` raises for an error status."""

__all__ = ["SERVER_NAME", "HTTPError", "MatrixUser", "Synapse", "free_port", "relaxed_rate_limits"]
