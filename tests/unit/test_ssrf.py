"""The address policy of web_fetch: every refused range, public addresses, exemptions."""

from __future__ import annotations

import os
import socket
import time
from ipaddress import ip_address
from pathlib import Path

import httpx
import pytest

from bot.agent.tools.ssrf import (
    AddressPolicy,
    IPAddress,
    connect_address,
    parse_url,
    resolve_target,
    system_resolver,
)
from bot.config import load_settings
from bot.errors import ConfigError, ToolError

PUBLIC_ONLY = AddressPolicy()


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("127.255.255.254", "a loopback address"),
        ("::1", "::1 is a loopback address"),
        ("10.0.0.5", "10.0.0.5 is a private address"),
        ("172.16.0.1", "a private address"),
        ("172.31.255.255", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fc00::1", "a private address"),
        ("fd12:3456::1", "a private address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("169.254.169.254", "169.254.169.254 is a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("100.64.0.1", "a shared (CGNAT) address"),
        ("100.127.255.255", "a shared (CGNAT) address"),
        ("224.0.0.1", "a multicast address"),
        ("239.255.255.250", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "an unspecified address"),
        ("0.1.2.3", "an unspecified address"),
        ("::", "an unspecified address"),
        ("240.0.0.1", "a reserved address"),
        ("255.255.255.255", "a reserved address"),
        ("fec0::1", "a reserved address"),
        # IPv6 addresses that carry an IPv4 one are judged as that IPv4 address.
        ("::ffff:127.0.0.1", "(that is 127.0.0.1) is a loopback address"),
        ("::ffff:10.0.0.1", "(that is 10.0.0.1) is a private address"),
        ("::ffff:169.254.169.254", "(that is 169.254.169.254) is a cloud metadata address"),
        ("::ffff:100.64.0.1", "(that is 100.64.0.1) is a shared (CGNAT) address"),
        ("::127.0.0.1", "(that is 127.0.0.1) is a loopback address"),  # IPv4-compatible
        ("2002:7f00:1::", "(that is 127.0.0.1) is a loopback address"),  # 6to4
        ("2002:a00:1::1", "(that is 10.0.0.1) is a private address"),
        ("64:ff9b::7f00:1", "(that is 127.0.0.1) is a loopback address"),  # NAT64
        ("64:ff9b::a9fe:a9fe", "(that is 169.254.169.254) is a cloud metadata address"),
        ("64:ff9b:1::a00:1", "a reserved address"),  # local-use NAT64
        # Special-purpose ranges caught by "not global".
        ("192.0.2.1", "192.0.2.1 is not a public address"),  # documentation
        ("198.18.0.1", "not a public address"),  # benchmarking
        ("2001:db8::1", "not a public address"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "a Teredo (tunnelled IPv4) address"),
    ],
)
def test_refused_addresses(address: str, reason: str) -> None:
    refusal = PUBLIC_ONLY.refusal(ip_address(address))
    assert refusal is not None and refusal.endswith(reason), refusal


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",  # just below CGNAT
        "100.128.0.1",  # just above
        "172.15.255.255",  # just outside 172.16/12
        "172.32.0.1",
        "169.255.0.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::1",  # 6to4 of 8.8.8.8
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert PUBLIC_ONLY.refusal(ip_address(address)) is None


@pytest.mark.parametrize(
    ("entries", "address", "allowed"),
    [
        (["127.0.0.1"], "127.0.0.1", True),
        (["127.0.0.1"], "::ffff:127.0.0.1", True),  # the IPv4 inside is what is exempt
        (["127.0.0.1"], "127.0.0.2", False),
        (["10.0.0.0/8"], "10.1.2.3", True),
        (["10.0.0.0/8"], "192.168.0.1", False),
        (["10.1.0.0/16", "192.168.0.0/24"], "192.168.0.77", True),
        (["fd00::/8"], "fd00::5", True),
        (["fd00::/8"], "fc00::5", False),
        (["intranet.example"], "10.0.0.1", False),  # a name exempts a host, not an address
    ],
)
def test_allow_hosts_networks(entries: list[str], address: str, allowed: bool) -> None:
    policy = AddressPolicy.from_entries(entries)
    assert (policy.refusal(ip_address(address)) is None) is allowed


@pytest.mark.parametrize(
    ("host", "exempt"),
    [
        ("intranet.example", True),
        ("INTRANET.example.", True),
        ("www.intranet.example", False),
        ("wiki.corp.example", True),
        ("a.b.corp.example", True),
        ("corp.example", True),
        ("evilcorp.example", False),
        ("corp.example.evil.test", False),
    ],
)
def test_allow_hosts_names(host: str, exempt: bool) -> None:
    policy = AddressPolicy.from_entries(["intranet.example", ".corp.example"])
    assert policy.host_exempt(host) is exempt


def test_a_mapped_address_is_connected_to_as_ipv4() -> None:
    assert connect_address(ip_address("::ffff:8.8.8.8")) == ip_address("8.8.8.8")
    assert connect_address(ip_address("2606:4700::1")) == ip_address("2606:4700::1")


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://example.com/x", "refused: only http and https URLs are fetched"),
        ("file:///etc/passwd", "refused: only http and https URLs are fetched"),
        ("javascript:alert(1)", "refused: only http and https URLs are fetched"),
        ("example.com/page", "refused: only http and https URLs are fetched"),
        ("http://user:pw@example.com/", "refused: URLs with credentials"),
        ("http://token@example.com/", "refused: URLs with credentials"),
        ("http:///path", "not a valid URL (no host)"),
        ("http://[::1/", "not a valid URL: Invalid port"),
        ("http://0177.0.0.1/", "not a valid URL: Invalid IPv4 address"),
    ],
)
def test_urls_that_are_refused_before_any_lookup(url: str, error: str) -> None:
    with pytest.raises(ToolError, match="^" + error.replace("(", r"\(").replace(")", r"\)")):
        parse_url(url)


def fixed(*addresses: str) -> tuple[list[str], object]:
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[IPAddress]:
        calls.append(f"{host}:{port}")
        return [ip_address(a) for a in addresses]

    return calls, resolver


def resolve(url: str, resolver: object, policy: AddressPolicy = PUBLIC_ONLY) -> list[str]:
    target = resolve_target(parse_url(url), policy=policy, resolver=resolver, timeout=2)  # type: ignore[arg-type]
    return [str(a) for a in target.addresses]


def test_every_address_of_a_name_is_judged() -> None:
    calls, resolver = fixed("93.184.216.34", "10.0.0.7")
    with pytest.raises(
        ToolError, match=r"^refused: sneaky\.test resolves to 10\.0\.0\.7, a private address$"
    ):
        resolve("https://sneaky.test/a", resolver)
    assert calls == ["sneaky.test:443"]


def test_a_public_name_resolves_to_its_checked_addresses() -> None:
    calls, resolver = fixed("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")
    assert resolve("http://example.test:8080/", resolver) == [
        "93.184.216.34",
        "2606:2800:220:1:248:1893:25c8:1946",
    ]
    assert calls == ["example.test:8080"]


def test_an_exempt_name_may_resolve_inward() -> None:
    _, resolver = fixed("10.0.0.7")
    policy = AddressPolicy.from_entries([".corp.example"])
    assert resolve("http://wiki.corp.example/", resolver, policy) == ["10.0.0.7"]


def test_ip_literals_are_not_looked_up() -> None:
    calls, resolver = fixed("8.8.8.8")
    with pytest.raises(ToolError, match=r"^refused: 169\.254\.169\.254 is a cloud metadata"):
        resolve("http://169.254.169.254/latest/meta-data/", resolver)
    with pytest.raises(ToolError, match=r"that is 127\.0\.0\.1\) is a loopback"):
        resolve("http://[::ffff:127.0.0.1]:8080/", resolver)
    assert calls == []


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.0.0.1"])
def test_odd_ipv4_spellings_are_judged_as_the_address_they_reach(host: str) -> None:
    # The system resolver parses these numerically (no DNS query): all are 127.0.0.1.
    with pytest.raises(ToolError, match=r"resolves to 127\.0\.0\.1, a loopback address"):
        resolve(f"http://{host}/", system_resolver)


def test_lookup_failures_and_hangs_are_short_texts() -> None:
    def failing(host: str, port: int) -> list[IPAddress]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def hanging(host: str, port: int) -> list[IPAddress]:
        time.sleep(3)
        return []

    with pytest.raises(ToolError, match=r"^cannot resolve nowhere\.test: Name or service"):
        resolve("http://nowhere.test/", failing)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"^timed out resolving slow\.test"):
        resolve_target(
            parse_url("http://slow.test/"), policy=PUBLIC_ONLY, resolver=hanging, timeout=0.2
        )
    assert time.monotonic() - started < 1.5


def test_idna_hosts_are_resolved_in_ascii() -> None:
    calls, resolver = fixed("93.184.216.34")
    resolve("https://bücher.example/", resolver)
    assert calls == ["xn--bcher-kva.example:443"]
    assert httpx.URL("https://bücher.example/").raw_host == b"xn--bcher-kva.example"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("clean_env")
def test_settings_read_allow_hosts_and_refuse_junk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_WEB__ALLOW_HOSTS", '["127.0.0.1", "10.0.0.0/8", ".corp.example"]')
    assert load_settings().web.allow_hosts == ["127.0.0.1", "10.0.0.0/8", ".corp.example"]
    monkeypatch.setenv("FANBOT_WEB__ALLOW_HOSTS", '["http://x/"]')
    with pytest.raises(ConfigError, match=r"FANBOT_WEB__ALLOW_HOSTS.*neither a hostname nor"):
        load_settings()


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"FANBOT_SEARCH__PROVIDER": "brave"}, "FANBOT_SEARCH: provider brave needs api_key"),
        ({"FANBOT_SEARCH__PROVIDER": "searxng"}, "FANBOT_SEARCH: provider searxng needs url"),
        ({"FANBOT_SEARCH__PROVIDER": "bing"}, "FANBOT_SEARCH__PROVIDER"),
        ({"FANBOT_SEARCH__KEY": "x"}, "FANBOT_SEARCH__KEY is not a setting"),
    ],
)
def test_search_settings_mistakes_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], error: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigError, match=error):
        load_settings()
