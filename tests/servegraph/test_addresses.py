"""The address policy of RayServeGraph fetches (`spec.fetch_addresses`): pure rules, plus the
resolver guard on a table-driven resolver (no DNS)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_operator.servegraph.resolution import AddressRefusedError, GuardedResolver
from ray_operator.spec.fetch_addresses import literal_refusal, parse_ip_literal, refusal

from tests.servegraph.artifact_server import StaticResolver

ALWAYS_REFUSED = [
    "169.254.169.254",  # the metadata endpoint of AWS, GCP, Azure
    "169.254.170.2",  # ECS task metadata
    "169.254.0.1",
    "fe80::1",
    "fe80::1%eth0",
    "fd00:ec2::254",  # AWS metadata over IPv6 (inside the private fc00::/7)
    "fd00:ec2::23",  # AWS EKS Pod Identity Agent over IPv6: credentials
    "fd00:ec2::253",  # AWS DNS resolver over IPv6 (the whole service block)
    "168.63.129.16",  # Azure WireServer: a public address
    "::ffff:168.63.129.16",
    "64:ff9b::a83f:8110",  # NAT64 of 168.63.129.16
    "fd20:ce::254",  # GCP metadata over IPv6
    "fd00:c1::a9fe:a9fe",  # Oracle Cloud metadata over IPv6
    "fd00:42::42",  # Scaleway metadata over IPv6
    "100.100.100.200",  # Alibaba Cloud metadata
    "192.0.0.192",  # Oracle Cloud metadata
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::a9fe:a9fe",  # IPv4-compatible
    "64:ff9b::a9fe:a9fe",  # NAT64
    "2002:a9fe:a9fe::1",  # 6to4
    "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254 (obfuscated)
    "0.0.0.0",
    "0.1.2.3",  # "this network": Linux connects it locally
    "::",
    "224.0.0.1",
    "ff02::1",
    "240.0.0.1",
    "255.255.255.255",
]
LOOPBACK = ["127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"]
ALLOWED = [
    "10.0.0.1",
    "168.63.129.17",  # WireServer's neighbour: only the one address is refused
    "fd00:ec3::254",  # outside AWS's service block
    "172.16.5.4",
    "192.168.1.10",
    "100.64.0.1",
    "8.8.8.8",
    "fd12:3456::1",
    "2001:db8::1",
    "2606:4700::1111",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",  # NAT64 to 10.0.0.1
]


@pytest.mark.parametrize("address", ALWAYS_REFUSED)
def test_link_local_metadata_multicast_unspecified_and_reserved_are_always_refused(
    address: str,
) -> None:
    parsed = ipaddress.ip_address(address)

    assert refusal(parsed, allow_loopback=False) is not None
    assert refusal(parsed, allow_loopback=True) is not None


@pytest.mark.parametrize(
    "address", ["168.63.129.16", "fd00:ec2::254", "fd20:ce::254", "fd00:c1::a9fe:a9fe"]
)
def test_metadata_addresses_outside_link_local_are_named_as_metadata(address: str) -> None:
    why = refusal(ipaddress.ip_address(address), allow_loopback=True)

    assert why == f"a cloud metadata address ({address})"


@pytest.mark.parametrize("address", LOOPBACK)
def test_loopback_is_refused_unless_allowed(address: str) -> None:
    parsed = ipaddress.ip_address(address)

    assert "loopback" in (refusal(parsed, allow_loopback=False) or "")
    assert refusal(parsed, allow_loopback=True) is None


@pytest.mark.parametrize("address", ALLOWED)
def test_private_and_public_addresses_are_allowed(address: str) -> None:
    assert refusal(ipaddress.ip_address(address), allow_loopback=False) is None


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_in_ipv6_clothing_is_judged_as_itself(
    address: ipaddress.IPv4Address,
) -> None:
    verdict = refusal(address, allow_loopback=False) is None
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(address))
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80) | 1)

    assert (refusal(mapped, allow_loopback=False) is None) == verdict
    assert (refusal(nat64, allow_loopback=False) is None) == verdict
    if not verdict:
        assert refusal(six_to_four, allow_loopback=False) is not None


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("169.254.169.254", True),
        ("[fe80::1]", True),
        ("fe80::1", True),
        ("2130706433", True),  # 127.0.0.1 as one number
        ("127.1", True),  # libc expands it to 127.0.0.1
        ("0177.0.0.1", True),  # octal
        ("10.0.0.1", False),
        ("registry.example.com", False),  # names: the resolver's business
        ("localhost", False),
    ],
)
def test_url_hosts_are_judged_when_they_are_ip_literals(host: str, refused: bool) -> None:
    assert (literal_refusal(host, allow_loopback=False) is not None) == refused


def test_ip_literals_parse_with_or_without_brackets() -> None:
    assert parse_ip_literal("[::1]") == ipaddress.ip_address("::1")
    assert parse_ip_literal("::1") == ipaddress.ip_address("::1")
    assert parse_ip_literal("registry.example.com") is None


async def test_the_resolver_guard_refuses_a_name_with_any_refused_address() -> None:
    inner = StaticResolver({"mixed.test": ["10.0.0.1", "169.254.169.254"]})
    guard = GuardedResolver(inner, allow_loopback=False, owns_inner=False)

    with pytest.raises(AddressRefusedError):
        await guard.resolve("mixed.test", 443)

    assert guard.refused is not None
    assert guard.refused[0] == "mixed.test"


async def test_the_resolver_guard_refuses_a_name_for_the_azure_wireserver() -> None:
    inner = StaticResolver({"wireserver.test": ["168.63.129.16"]})
    guard = GuardedResolver(inner, allow_loopback=True, owns_inner=False)

    with pytest.raises(AddressRefusedError):
        await guard.resolve("wireserver.test", 80)

    assert guard.refused == ("wireserver.test", "a cloud metadata address (168.63.129.16)")


async def test_the_resolver_guard_passes_allowed_addresses_through() -> None:
    inner = StaticResolver({"registry.test": ["10.0.0.1", "fd12::1"]})
    guard = GuardedResolver(inner, allow_loopback=False, owns_inner=False)

    results = await guard.resolve("registry.test", 443)

    assert [result["host"] for result in results] == ["10.0.0.1", "fd12::1"]
    assert guard.refused is None
