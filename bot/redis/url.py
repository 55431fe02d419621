"""``FANBOT_REDIS_URL`` read as plain data: which Redis, how to reach it, how to name it.

Every process builds its Redis clients from one URL (:mod:`bot.redis.connect` does the I/O);
this module only parses and checks it. The forms:

- ``redis://[user:password@]host:6379/0`` — plain TCP; ``user`` is an ACL user.
- ``rediss://[user:password@]host:6380/0?ssl_ca_certs=/ca.pem`` — TLS; the ``ssl_*`` query
  options are redis-py's (``ssl_cert_reqs=required|optional|none``, ``ssl_ca_certs``,
  ``ssl_certfile``, ``ssl_keyfile``, ``ssl_check_hostname``, ``ssl_ca_path``).
- ``unix:///path/redis.sock?db=0`` — a local socket.
- ``redis+sentinel://[user:password@]host1:26379,host2:26379/<service>[/db]`` — the master
  of ``service`` as the Sentinels report it, followed across failovers. The credentials are
  the data nodes'; Sentinels that need their own are given ``?sentinel_password=…`` (and
  ``sentinel_username=…``). ``rediss+sentinel://`` speaks TLS to the Sentinels and the nodes.

Nothing here opens a socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SCHEMES = PLAIN_SCHEMES + SENTINEL_SCHEMES
DEFAULT_SENTINEL_PORT = 26379
SSL_OPTIONS = frozenset(
    {
        "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path",
        "ssl_password", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers",
        "ssl_include_verify_flags", "ssl_exclude_verify_flags",
    }
)  # fmt: skip
SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})
NUMBERS = frozenset(
    {
        "db", "socket_timeout", "socket_connect_timeout", "socket_read_size", "max_connections",
        "health_check_interval", "ssl_min_version", "timeout", "protocol",
    }
)  # fmt: skip
FLAGS = frozenset({"socket_keepalive", "retry_on_timeout", "ssl_check_hostname"})
OPTIONS = NUMBERS | FLAGS | SSL_OPTIONS | {"client_name", "legacy_responses"}
"""The query options redis-py's ``from_url`` understands (and fanbot passes on)."""
CERT_REQS = ("none", "optional", "required")


@dataclass(frozen=True, kw_only=True)
class SentinelTarget:
    """A Sentinel URL taken apart.

    Attributes:
        sentinels: ``(host, port)`` of each Sentinel.
        service: The monitored master's name.
        node_url: A one-node URL (scheme, credentials, db, options) for the master, with a
            placeholder host: its connection options, as redis-py parses them.
        sentinel: Options for connections to the Sentinels (their own credentials).
        tls: Whether both speak TLS.
    """

    sentinels: tuple[tuple[str, int], ...]
    service: str
    node_url: str
    sentinel: dict[str, str]
    tls: bool


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower()


def is_sentinel(url: str) -> bool:
    return scheme_of(url) in SENTINEL_SCHEMES


def parse_sentinel(url: str) -> SentinelTarget:
    """Take a ``redis+sentinel://`` URL apart.

    Raises:
        ValueError: It names no Sentinel, no service, a bad port or a bad db.
    """
    parts = urlsplit(url)
    tls = scheme_of(url).startswith("rediss")
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = tuple(_host_port(h) for h in hosts.split(",") if h)
    if not sentinels:
        raise ValueError("names no Sentinel host")
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError("needs the service name as its path: …/<service_name>[/db]")
    if len(path) == 2 and not path[1].isdigit():
        raise ValueError(f"db {path[1]!r} is not a number")
    query = dict(parse_qsl(parts.query))
    auth = {k.removeprefix("sentinel_"): query.pop(k) for k in SENTINEL_OPTIONS & set(query)}
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@node" if userinfo else "node"
    db = f"/{path[1] if len(path) == 2 else 0}"
    node_url = urlunsplit(("rediss" if tls else "redis", netloc, db, urlencode(query), ""))
    tls_options = {k: v for k, v in query.items() if k.startswith("ssl_")}
    return SentinelTarget(
        sentinels=sentinels,
        service=path[0],
        node_url=node_url,
        sentinel={**auth, **tls_options},
        tls=tls,
    )


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        return text.strip("[]"), DEFAULT_SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Sentinel {text!r} has a bad port")
    return host.strip("[]"), int(port)


def problem(url: str) -> str | None:
    """Why ``url`` (with a known scheme) would not connect as meant, or None."""
    scheme = scheme_of(url)
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query)
        if scheme in SENTINEL_SCHEMES:
            parse_sentinel(url)
        elif scheme != "unix":
            _ = parts.port  # a bad port raises here
            if parts.path.strip("/") and not parts.path.strip("/").isdigit():
                raise ValueError(f"db {parts.path.strip('/')!r} is not a number")
    except ValueError as exc:
        return f"{public_url(url)!r}: {exc}"
    allowed = OPTIONS | (SENTINEL_OPTIONS if scheme in SENTINEL_SCHEMES else frozenset())
    for key, value in query:
        if key not in allowed:
            return f"{public_url(url)!r} has an unknown option {key!r}"
        if key in SSL_OPTIONS and not scheme.startswith("rediss"):
            return f"{public_url(url)!r} sets {key} but is not TLS; write rediss://"
        if key == "ssl_cert_reqs" and value.lower() not in CERT_REQS:
            return f"{public_url(url)!r}: ssl_cert_reqs must be one of {', '.join(CERT_REQS)}"
        if key in NUMBERS and not _number(value):
            return f"{public_url(url)!r}: {key} must be a number, not {value!r}"
    return None


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def public_url(url: str) -> str:
    """``url`` as it may be shown or logged: a password in it (the URL's own, or a
    ``*password`` query option) becomes ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc and "password" not in parts.query:
        return url
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}" if user else f"***@{host}"
    query = parts.query
    if "password" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'***' if 'password' in k else v}" for k, v in pairs)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def secrets_in(url: str) -> list[str]:
    """The passwords written in ``url`` (for log redaction)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [unquote(parts.password)] if parts.password else []
    found += [v for k, v in parse_qsl(parts.query) if "password" in k and v]
    return found


def address(url: str) -> str:
    """What an operator needs to find the server: ``host:port``, the socket path, or the
    Sentinels and service; never a password."""
    scheme = scheme_of(url)
    try:
        parts = urlsplit(url)
        if scheme in SENTINEL_SCHEMES:
            target = parse_sentinel(url)
            hosts = ",".join(f"{h}:{p}" for h, p in target.sentinels)
            return f"master {target.service!r} via Sentinel {hosts}"
        if scheme == "unix":
            return parts.path
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    except ValueError:
        return public_url(url)
