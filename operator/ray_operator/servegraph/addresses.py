"""Which network addresses a RayServeGraph fetch may connect to.

An artifact URL comes from a custom resource, so whoever may create a RayServeGraph chooses where
the operator connects (and, once a Secret opted in, where a token goes). The policy:

- refused always: link-local (169.254.0.0/16, fe80::/10: the cloud metadata endpoints live
  there), cloud metadata addresses outside it (AWS's IPv6 `fd00:ec2::254`, Alibaba's
  `100.100.100.200`, Oracle's `192.0.0.192`), multicast, unspecified (`0.0.0.0/8`, `::`; Linux
  connects `0.0.0.0` to the local host) and reserved ranges;
- loopback (127.0.0.0/8, `::1`) only when the operator allows it (tests, `make run`): the
  operator's own probes and metrics listen there;
- private ranges allowed: registries live there.

IPv6 forms that carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo) are judged by the IPv4 address inside as well, or
`::ffff:169.254.169.254` would slip through.

Two places apply it, because aiohttp resolves names but connects to IP literals directly
(`TCPConnector._resolve_host` returns a literal as is): `literal_refusal` on the URL's host before
each request, and `GuardedResolver` on every address a name resolves to. The resolver check runs
on the addresses aiohttp then connects to, so DNS rebinding between a check and the connect
cannot slip a metadata address in.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    {
        ipaddress.IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack (link-local anyway)
        ipaddress.IPv6Address("fd00:ec2::254"),  # AWS IMDS over IPv6: inside fc00::/7 (private)
        ipaddress.IPv4Address("100.100.100.200"),  # Alibaba Cloud: inside 100.64.0.0/10
        ipaddress.IPv4Address("192.0.0.192"),  # Oracle Cloud Infrastructure (classic)
    }
)
"""Cloud metadata endpoints, named explicitly where no range rule below covers them."""

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


class AddressRefusedError(OSError):
    """A name resolved to a refused address. An OSError so aiohttp treats it as a failed lookup
    (it wraps it in ClientConnectorDNSError); the fetch reads `GuardedResolver.refused`."""


class GuardedResolver(AbstractResolver):
    """Resolves with `inner`, refusing the name if any of its addresses is refused.

    All or nothing: a name resolving to a private address and to the metadata address is
    hostile, not half-usable. `refused` keeps the first refusal (host, why) for the caller, as
    aiohttp hands resolver errors on wrapped in its own exception type.
    """

    def __init__(self, inner: AbstractResolver, *, allow_loopback: bool, owns_inner: bool) -> None:
        self._inner = inner
        self._allow_loopback = allow_loopback
        self._owns_inner = owns_inner
        self.refused: tuple[str, str] | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = parse_ip_literal(result["host"])
            if address is None:
                why: str | None = "an address that is not an IP"
            else:
                why = refusal(address, allow_loopback=self._allow_loopback)
            if why is not None:
                self.refused = self.refused or (host, why)
                raise AddressRefusedError(f"{host} resolves to {why}")
        return results

    async def close(self) -> None:
        if self._owns_inner:
            await self._inner.close()


def _first_refusal(addresses: Sequence[IPAddress], *, allow_loopback: bool) -> str | None:
    for address in addresses:
        why = _own_refusal(address, allow_loopback=allow_loopback)
        if why is not None:
            return why
    return None


def _own_refusal(address: IPAddress, *, allow_loopback: bool) -> str | None:
    """The rules on one address, without looking inside it. Order matters: Python counts `::1`
    as reserved, so loopback is decided first."""
    if address in METADATA_ADDRESSES:
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
