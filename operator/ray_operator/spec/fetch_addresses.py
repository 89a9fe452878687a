"""Which network addresses a RayServeGraph fetch may connect to: pure rules, no I/O.

An artifact URL comes from a custom resource, so whoever may create a RayServeGraph chooses where
the operator connects (and, once a Secret opted in, where a token goes). The policy:

- refused always: link-local (169.254.0.0/16, fe80::/10: most cloud metadata endpoints live
  there), the cloud metadata and host-agent addresses outside it (`METADATA_NETWORKS`: Azure's
  WireServer `168.63.129.16`, AWS's IPv6 service block, GCP's, Oracle's and Scaleway's IPv6
  metadata, Alibaba's `100.100.100.200`, Oracle Classic's `192.0.0.192`), multicast,
  unspecified (`0.0.0.0/8`, `::`; Linux connects `0.0.0.0` to the local host) and reserved
  ranges;
- loopback (127.0.0.0/8, `::1`) only when the operator allows it (tests, `make run`): the
  operator's own probes and metrics listen there;
- private ranges allowed: registries live there.

IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo) are judged by the IPv4 address inside as well, or
`::ffff:169.254.169.254` would slip through.

Three places apply it: the admission webhook (`validation.rayservegraph`) on an IP literal in
`spec.source.url`; the fetch (`literal_refusal`) on the URL's host before each request, because
aiohttp connects to IP literals without resolving them; and `resolution.GuardedResolver` on every
address a name resolves to, which are the addresses aiohttp then connects to, so DNS rebinding
between a check and the connect cannot slip a metadata address in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(network)
    for network in (
        # Inside link-local (refused by that rule too), named so a message says what they are:
        "169.254.169.254/32",  # IMDS of AWS, GCP, Azure, OCI, OpenStack, DigitalOcean, ...
        "169.254.170.2/32",  # AWS ECS task credentials
        "169.254.170.23/32",  # AWS EKS Pod Identity Agent: hands out IAM credentials
        # Outside every range rule below, so listed or not refused at all:
        "168.63.129.16/32",  # Azure WireServer: the host node's agent channel, a public address
        # AWS's IPv6 service block: IMDS ::254, EKS Pod Identity Agent ::23, DNS ::253, NTP ::123
        # (AWS "IPv6 on AWS", "Set up the Amazon EKS Pod Identity Agent"); private (fc00::/7).
        "fd00:ec2::/32",
        "fd20:ce::254/128",  # Google Compute Engine metadata server over IPv6
        "fd00:c1::a9fe:a9fe/128",  # Oracle Cloud Infrastructure IMDS over IPv6
        "fd00:42::42/128",  # Scaleway instance metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud ECS metadata: inside 100.64.0.0/10 (shared)
        "192.0.0.192/32",  # Oracle Cloud Infrastructure Classic metadata
    )
)
"""Cloud metadata and host-agent endpoints: they answer any process on the node, often with
credentials, so a fetch that reaches them lends the node's identity to whoever wrote the URL."""

_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def refusal(address: IPAddress, *, allow_loopback: bool) -> str | None:
    """Why a connection to `address` is refused (a short phrase for a message), or None."""
    embedded = list(_embedded_ipv4(address))
    if isinstance(address, ipaddress.IPv6Address) and _is_translation(address):
        # The IPv6 form only transports the IPv4 address (Python calls these ranges reserved).
        return _first_refusal(embedded, allow_loopback=allow_loopback)
    return _first_refusal([address, *embedded], allow_loopback=allow_loopback)


def literal_refusal(host: str, *, allow_loopback: bool) -> str | None:
    """Why the URL host `host` is refused when it is an IP literal; None for allowed literals
    and for names (those are checked by `GuardedResolver` when they resolve)."""
    address = parse_ip_literal(host)
    if address is not None:
        return refusal(address, allow_loopback=allow_loopback)
    if host.replace(".", "").isdigit():
        # `2130706433`, `127.1`, `0177.0.0.1`: legacy numeric forms libc still maps to addresses.
        return "a numeric host that is not a canonical IP address"
    return None


def parse_ip_literal(host: str) -> IPAddress | None:
    """The IP address `host` (as in a URL, IPv6 with or without brackets) spells, or None."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _first_refusal(addresses: Sequence[IPAddress], *, allow_loopback: bool) -> str | None:
    for address in addresses:
        why = _own_refusal(address, allow_loopback=allow_loopback)
        if why is not None:
            return why
    return None


def _own_refusal(address: IPAddress, *, allow_loopback: bool) -> str | None:
    """The rules on one address, without looking inside it. Order matters: Python counts `::1`
    as reserved, so loopback is decided first."""
    if any(address in network for network in METADATA_NETWORKS):
        return f"a cloud metadata address ({address})"
    if address.is_loopback:
        return None if allow_loopback else f"a loopback address ({address}), not allowed here"
    if address.is_link_local:
        return f"a link-local address ({address})"
    if address.is_unspecified or (
        isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK
    ):
        return f"an unspecified address ({address})"
    if address.is_multicast:
        return f"a multicast address ({address})"
    if address.is_reserved:
        return f"a reserved address ({address})"
    return None


def _is_translation(address: ipaddress.IPv6Address) -> bool:
    """IPv4-mapped, NAT64 and IPv4-compatible forms: an IPv4 address in IPv6 clothing."""
    if address.ipv4_mapped is not None or address in _NAT64:
        return True
    return address in _IPV4_COMPATIBLE and int(address) > 1  # not `::` nor `::1`


def _embedded_ipv4(address: IPAddress) -> Iterator[ipaddress.IPv4Address]:
    if isinstance(address, ipaddress.IPv4Address):
        return
    if address.ipv4_mapped is not None:
        yield address.ipv4_mapped
    if address.sixtofour is not None:
        yield address.sixtofour
    if address.teredo is not None:
        yield from address.teredo
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        yield ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
