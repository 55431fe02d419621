"""Every IPv6 form that carries an IPv4 address is judged as that address (issue 27).

Table-driven: each embedding (mapped, translated, compatible, 6to4, NAT64) of each inward
IPv4 address is refused, the same embedding of a public address is not; the prefixes whose
IPv4 address cannot be judged (Teredo, local-use NAT64) are refused whole.
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from bot.agent.tools.ssrf import AddressPolicy, embedded_ipv4

PUBLIC_ONLY = AddressPolicy()


def _low32(prefix: str) -> Callable[[IPv4Address], IPv6Address]:
    return lambda v4: IPv6Address(int(IPv6Address(prefix)) | int(v4))


def _sixtofour(v4: IPv4Address) -> IPv6Address:
    return IPv6Address((0x2002 << 112) | (int(v4) << 80) | 1)


EMBEDDINGS: dict[str, Callable[[IPv4Address], IPv6Address]] = {
    "mapped ::ffff:0:0/96": _low32("::ffff:0:0"),
    "translated ::ffff:0:0:0/96": _low32("::ffff:0:0:0"),
    "compatible ::/96": _low32("::"),
    "NAT64 64:ff9b::/96": _low32("64:ff9b::"),
    "6to4 2002::/16": _sixtofour,
}

INWARD = {
    "127.0.0.1": "a loopback address",
    "10.0.0.1": "a private address",
    "192.168.1.1": "a private address",
    "169.254.169.254": "a cloud metadata address",
    "100.64.0.1": "a shared (CGNAT) address",
}


@pytest.mark.parametrize("form", sorted(EMBEDDINGS))
@pytest.mark.parametrize("v4", sorted(INWARD))
def test_each_embedding_of_an_inward_address_is_refused(form: str, v4: str) -> None:
    ip = EMBEDDINGS[form](IPv4Address(v4))
    assert embedded_ipv4(ip) == IPv4Address(v4)
    refusal = PUBLIC_ONLY.refusal(ip)
    assert refusal is not None and refusal.endswith(f"(that is {v4}) is {INWARD[v4]}"), refusal


@pytest.mark.parametrize("form", sorted(EMBEDDINGS))
def test_each_embedding_of_a_public_address_is_allowed(form: str) -> None:
    assert PUBLIC_ONLY.refusal(EMBEDDINGS[form](IPv4Address("8.8.8.8"))) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::ffff:0:7f00:1", "(that is 127.0.0.1) is a loopback address"),  # the report's one
        ("::ffff:0:a9fe:a9fe", "(that is 169.254.169.254) is a cloud metadata address"),
        ("2001::1", "a Teredo (tunnelled IPv4) address"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a Teredo (tunnelled IPv4) address"),
        ("2001:0:808:808::1", "a Teredo (tunnelled IPv4) address"),  # public server: still
        ("64:ff9b:1::808:808", "a reserved address"),  # local-use NAT64, any embedded address
    ],
)
def test_named_forms(address: str, reason: str) -> None:
    refusal = PUBLIC_ONLY.refusal(ip_address(address))
    assert refusal is not None and refusal.endswith(reason), refusal
