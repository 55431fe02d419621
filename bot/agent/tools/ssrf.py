"""Which addresses ``web_fetch`` may reach, and the checked resolution of a URL's host.

The model chooses the URLs, so a fetch must never become a way into the worker's own
network: loopback, private, link-local, shared (CGNAT), multicast, reserved and cloud
metadata addresses are refused, also when an IPv6 address carries one (IPv4-mapped,
IPv4-translated, IPv4-compatible, 6to4, NAT64; Teredo and local-use NAT64, whose IPv4
address cannot be judged, are refused whole). The host is resolved here, once, every address it resolves
to is judged, and the caller connects to one of those very addresses: there is no second
lookup that a rebinding DNS server could answer differently. ``FANBOT_WEB__ALLOW_HOSTS``
exempts named hosts or networks (an intranet, test servers).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import httpx

from bot.errors import ToolError

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
Resolver = Callable[[str, int], Sequence[IPAddress]]

# Checked in order; the first match names the refusal. Metadata comes first: it is also
# link-local or private, but "cloud metadata" says why it matters. 168.63.129.16 (Azure's
# wire server) and 100.100.100.200 (Alibaba's metadata) answer only from inside a cloud.
_RANGES: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = tuple(
    (label, tuple(ip_network(n) for n in nets))
    for label, nets in (
        (
            "a cloud metadata address",
            ("169.254.169.254/32", "fd00:ec2::254/128", "168.63.129.16/32", "100.100.100.200/32"),
        ),
        ("an unspecified address", ("0.0.0.0/8", "::/128")),
        ("a loopback address", ("127.0.0.0/8", "::1/128")),
        ("a private address", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
        ("a link-local address", ("169.254.0.0/16", "fe80::/10")),
        ("a shared (CGNAT) address", ("100.64.0.0/10",)),
        ("a multicast address", ("224.0.0.0/4", "ff00::/8")),
        # 64:ff9b:1::/48 is local-use NAT64 (RFC 8215): the operator's own translator, with
        # the IPv4 address at a prefix-dependent place, so the whole prefix is refused.
        ("a reserved address", ("240.0.0.0/4", "fec0::/10", "64:ff9b:1::/48")),
        # Teredo (RFC 4380) tunnels to an IPv4 host through a relay chosen by the network:
        # refused whole rather than left to ``is_global``, whose table changes by version.
        ("a Teredo (tunnelled IPv4) address", ("2001::/32",)),
    )
)
_NAT64 = ip_network("64:ff9b::/96")
_IPV4_TRANSLATED = ip_network("::ffff:0:0:0/96")  # RFC 2765's SIIT form, ::ffff:0:a.b.c.d
_IPV4_COMPATIBLE = ip_network("::/96")


def embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (mapped, translated, compatible, 6to4,
    NAT64), else ``ip``.

    Each of these reaches an IPv4 host, so it is judged as that host.
    """
    if isinstance(ip, IPv4Address):
        return ip
    inner = ip.ipv4_mapped or ip.sixtofour
    if inner is not None:
        return inner
    compatible = ip in _IPV4_COMPATIBLE and int(ip) > 1  # :: and ::1 are IPv6's own
    if ip in _NAT64 or ip in _IPV4_TRANSLATED or compatible:
        return IPv4Address(int(ip) & 0xFFFF_FFFF)
    return ip


def classify(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address ("a private address"), or None when it is one."""
    for label, networks in _RANGES:
        if any(ip in net for net in networks):
            return label
    # Documentation, benchmarking, Teredo, discard-only and other special-purpose ranges.
    return None if ip.is_global else "not a public address"


@dataclass(frozen=True, kw_only=True)
class AddressPolicy:
    """Public addresses only, except the hosts and networks the operator exempts.

    Attributes:
        names: Exempt host names, lower case, without a trailing dot.
        suffixes: Exempt domains with their subdomains, each with its leading dot
            (".corp.example").
        networks: Exempt networks.
    """

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> AddressPolicy:
        """Build from ``FANBOT_WEB__ALLOW_HOSTS`` entries: IPs, CIDRs or host names."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for entry in entries:
            try:
                networks.append(ip_network(entry, strict=False))
            except ValueError:
                name = entry.lower().rstrip(".")
                if name.startswith("."):
                    suffixes.append(name)
                else:
                    names.add(name)
        return cls(names=frozenset(names), suffixes=tuple(suffixes), networks=tuple(networks))

    def host_exempt(self, host: str) -> bool:
        """Whether every address of ``host`` may be reached, because of its name."""
        name = host.lower().rstrip(".")
        return name in self.names or any(
            name.endswith(suffix) or name == suffix[1:] for suffix in self.suffixes
        )

    def refusal(self, ip: IPAddress, *, host: str | None = None) -> str | None:
        """Why ``ip`` must not be reached, or None.

        "10.0.0.5 is a private address"; with ``host``, "db.test resolves to 10.0.0.5, a
        private address".
        """
        judged = embedded_ipv4(ip)
        if any(judged in net or ip in net for net in self.networks):
            return None
        reason = classify(judged)
        if reason is None:
            return None
        shown = str(ip) if judged == ip else f"{ip} (that is {judged})"
        return f"{host} resolves to {shown}, {reason}" if host else f"{shown} is {reason}"


def connect_address(ip: IPAddress) -> IPAddress:
    """Where to connect for ``ip``: an IPv4-mapped address is its IPv4 address."""
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True, kw_only=True)
class Target:
    """A URL whose host has been resolved and judged.

    Attributes:
        url: The URL as asked for (its host is a name or an IP literal).
        host: The ASCII (IDNA) host, for the Host header, TLS SNI and certificate checks.
        addresses: The judged addresses; connect only to these.
    """

    url: httpx.URL
    host: str
    addresses: tuple[IPAddress, ...]


def parse_url(text: str) -> httpx.URL:
    """``text`` as an absolute http(s) URL without credentials, else :class:`ToolError`."""
    try:
        url = httpx.URL(text.strip())
    except httpx.InvalidURL as exc:
        raise ToolError(f"not a valid URL: {exc}") from None
    if url.scheme not in ("http", "https"):
        raise ToolError(f"refused: only http and https URLs are fetched, not {text[:80]!r}")
    if url.userinfo:
        raise ToolError("refused: URLs with credentials (user:password@) are not fetched")
    if not url.host:
        raise ToolError(f"not a valid URL (no host): {text[:80]!r}")
    return url


def resolve_target(
    url: httpx.URL, *, policy: AddressPolicy, resolver: Resolver, timeout: float
) -> Target:
    """Resolve ``url``'s host and judge every address; :class:`ToolError` if one is refused.

    One refused address refuses the host: a name that also points inward is not trusted.
    """
    host = url.raw_host.decode("ascii")
    try:
        addresses: tuple[IPAddress, ...] = (ip_address(host),)
        name = None
    except ValueError:
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses, name = tuple(_lookup(resolver, host, port, timeout)), host
    if not addresses:
        raise ToolError(f"cannot resolve {host}: no addresses")
    if not policy.host_exempt(host):
        for ip in addresses:
            if (reason := policy.refusal(ip, host=name)) is not None:
                raise ToolError(f"refused: {reason}")
    return Target(url=url, host=host, addresses=addresses)


def _lookup(resolver: Resolver, host: str, port: int, timeout: float) -> Sequence[IPAddress]:
    """Run ``resolver`` within ``timeout``: getaddrinfo has no limit of its own and can
    block for the system resolver's whole retry cycle."""
    future: Future[Sequence[IPAddress]] = Future()

    def work() -> None:
        try:
            future.set_result(resolver(host, port))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name="web-resolve", daemon=True).start()
    try:
        return future.result(timeout=max(timeout, 0.0))
    except TimeoutError:
        raise ToolError(f"timed out resolving {host}") from None
    except OSError as exc:
        raise ToolError(f"cannot resolve {host}: {exc.strerror or exc}") from None


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The system's addresses for ``host`` (getaddrinfo), in its order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: dict[IPAddress, None] = {}
    for *_, sockaddr in infos:
        found.setdefault(ip_address(sockaddr[0]), None)
    return list(found)
