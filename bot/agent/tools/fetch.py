"""One bounded, address-checked HTTP GET, following redirects by hand.

Every hop resolves its host once (:mod:`bot.agent.tools.ssrf`), judges every address, and
connects to a judged address itself: the request httpx sends names the IP, while the Host
header and the TLS SNI name the host, and the certificate is verified against the host
name. No hop asks DNS a second time, so a rebinding answer cannot move the connection.
Proxies from the environment are ignored for the same reason.

Bounds: the body is read up to ``max_bytes`` (decoded bytes, so a compressed bomb is cut
too), the whole fetch — lookups, redirects, body — ends after ``timeout_seconds``, and at
most ``max_redirects`` redirects are followed, each one checked like the first URL.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bot.agent.tools.ssrf import (
    AddressPolicy,
    Resolver,
    Target,
    connect_address,
    parse_url,
    resolve_target,
    system_resolver,
)
from bot.config import WebSettings
from bot.errors import ToolError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, kw_only=True)
class Fetched:
    """A response read within the bounds.

    Attributes:
        url: The final URL (after redirects).
        status: Its HTTP status.
        content_type: Its Content-Type header ("" when absent).
        charset: The charset the header declares, if any.
        body: The body, decoded from its transfer encoding, at most ``max_bytes``.
        peer: The address actually connected to.
        redirects: How many redirects led here.
        notes: What was cut, for the reader.
    """

    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    peer: str
    redirects: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        """Whether the whole body was read (a note is written only when it was cut)."""
        return not self.notes


@functools.cache
def _default_tls() -> ssl.SSLContext:
    # Built once per process: loading the CA bundle (certifi's) costs more than a small fetch.
    return httpx.create_ssl_context()


@dataclass(frozen=True, kw_only=True)
class Fetcher:
    """Fetches public URLs within bounds.

    Attributes:
        policy: Which addresses may be reached.
        max_bytes: Body bytes kept; the rest is not read.
        timeout_seconds: The whole fetch.
        max_redirects: Redirects followed.
        user_agent: Sent with every request.
        resolver: Host name → addresses (the system's by default; tests pass their own).
        tls: Trusted CAs (certifi's by default).
    """

    policy: AddressPolicy
    max_bytes: int = 5_000_000
    timeout_seconds: float = 20.0
    max_redirects: int = 5
    user_agent: str = "fanbot-web-fetch/0.1"
    resolver: Resolver = system_resolver
    tls: ssl.SSLContext | None = None

    @classmethod
    def from_settings(cls, web: WebSettings, **overrides: Any) -> Fetcher:
        """A fetcher with ``FANBOT_WEB__*`` bounds; ``overrides`` replace any field."""
        fields: dict[str, Any] = {
            "policy": AddressPolicy.from_entries(web.allow_hosts),
            "max_bytes": web.max_bytes,
            "timeout_seconds": web.timeout_seconds,
            "max_redirects": web.max_redirects,
            "user_agent": web.user_agent,
        }
        return cls(**(fields | overrides))

    def fetch(self, url: str) -> Fetched:
        """GET ``url``; :class:`ToolError` with a short reason when refused or failed."""
        deadline = time.monotonic() + self.timeout_seconds
        current = parse_url(url)
        headers = {"User-Agent": self.user_agent, "Accept": "text/html,application/xhtml+xml,*/*"}
        try:
            with httpx.Client(
                verify=self.tls or _default_tls(), trust_env=False, headers=headers
            ) as client:
                for hop in range(self.max_redirects + 1):
                    outcome = self._hop(client, current, deadline, hop)
                    if isinstance(outcome, Fetched):
                        return outcome
                    current = outcome
        except httpx.TimeoutException:
            raise ToolError(f"timed out after {self.timeout_seconds:g} s fetching {url}") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"fetch failed: {type(exc).__name__}: {exc}") from None
        raise ToolError(f"refused: more than {self.max_redirects} redirects (next: {current})")

    def _hop(
        self, client: httpx.Client, url: httpx.URL, deadline: float, hop: int
    ) -> Fetched | httpx.URL:
        """One request: the response, read; or the checked URL it redirects to."""
        target = resolve_target(
            url, policy=self.policy, resolver=self.resolver, timeout=self._left(deadline)
        )
        response = self._send(client, target, deadline)
        try:
            location = response.headers.get("location")
            if response.status_code in _REDIRECTS and location:
                return parse_url(str(url.join(location)))
            return self._read(response, target, deadline, hop)
        finally:
            response.close()

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ToolError(f"timed out after {self.timeout_seconds:g} s")
        return left

    def _send(self, client: httpx.Client, target: Target, deadline: float) -> httpx.Response:
        """GET from the first judged address that accepts a connection."""
        failure: httpx.ConnectError | None = None
        for address in target.addresses:
            pinned = target.url.copy_with(host=str(connect_address(address)), fragment=None)
            request = client.build_request(
                "GET",
                pinned,
                headers={"Host": target.url.netloc.decode("ascii")},
                extensions={"sni_hostname": target.host},
                timeout=self._left(deadline),
            )
            try:
                return client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failure = exc
        raise ToolError(f"cannot connect to {target.host}: {failure}")

    def _read(
        self, response: httpx.Response, target: Target, deadline: float, hops: int
    ) -> Fetched:
        peer = _peer(response)  # now: the server may close the socket after the body
        body, notes = bytearray(), []
        with _Watchdog(response, self._left(deadline)) as watchdog:
            try:
                for chunk in response.iter_bytes():
                    room = self.max_bytes - len(body)
                    body += chunk[:room]
                    if len(chunk) > room:
                        notes.append(f"the body was cut at {self.max_bytes:,} bytes")
                        break
            except httpx.TransportError:
                if not watchdog.fired:
                    raise
        if watchdog.fired:
            if not body:
                raise ToolError(f"timed out after {self.timeout_seconds:g} s reading {target.url}")
            notes.append(f"the download was cut after {self.timeout_seconds:g} s")
        return Fetched(
            url=str(target.url),
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            charset=response.charset_encoding,
            body=bytes(body),
            peer=peer,
            redirects=hops,
            notes=tuple(notes),
        )


def _socket(response: httpx.Response) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _peer(response: httpx.Response) -> str:
    sock = _socket(response)
    try:
        return str(sock.getpeername()[0]) if sock is not None else ""
    except OSError:  # closed already
        return ""


class _Watchdog:
    """Shuts the response's socket down when the fetch's time is up.

    httpx's read timeout bounds each read, not the body: a server dripping a byte a second
    would keep a fetch alive forever. Shutting the socket down ends the blocked read.
    """

    def __init__(self, response: httpx.Response, seconds: float) -> None:
        self._sock = _socket(response)
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self.fired = False

    def _fire(self) -> None:
        self.fired = True
        if self._sock is not None:
            # OSError: already closed, the read ended on its own.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()
