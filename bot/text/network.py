"""Why a connection failed, in plain words, from the exception chain a client library raised
(``DNS lookup failed: Name or service not known``, ``connection refused``), for the one log
line that says a platform cannot be reached (docs/troubleshooting.md)."""

from __future__ import annotations

import socket


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (cycles cut)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def unreachable_reason(exc: BaseException) -> str | None:
    """The plain-words reason a connection failed, or ``None`` when the chain holds no
    failure of the network itself (pure)."""
    for e in causes(exc):
        os_error = getattr(e, "os_error", None)  # aiohttp keeps the socket's error there
        for found in (e, os_error):
            if isinstance(found, socket.gaierror):
                return f"DNS lookup failed: {found.strerror or found}"
            if isinstance(found, ConnectionRefusedError):
                return "connection refused"
            if isinstance(found, ConnectionResetError):
                return "connection reset"
    return None
