"""Origin lists: the entries of a token Secret's `ray-operator.io/serve-graph-hosts` annotation
and of `--serve-graph-allowed-hosts`. Pure: text in, verdicts out.

An entry names exactly one origin, (scheme, host, port) as RFC 6454 counts them:

    registry.example.com          https://registry.example.com:443
    registry.example.com:8443     https://registry.example.com:8443
    https://registry.example.com  the same as the first, spelled out
    http://127.0.0.1:8765         http, in clear text: only an entry spelled so allows it

A scheme-less entry means https and nothing else: a Secret opted in for `reg.example.com` is
never sent in clear text to `http://reg.example.com`, even when the graph sets
`allowInsecureHTTP` (port 80 of a host is another service than its port 443, and the wire
between is anyone's). Host names compare without case or a trailing dot; IP literals by value
(`[fd00::1]` and `[fd00:0::1]` are one host; IPv6 in brackets, or bare without a port).
An entry that does not parse (a path, a user, another scheme, a port out of range) matches
nothing; `malformed_entries` names them, for start-up checks and messages.
"""

from __future__ import annotations

from collections.abc import Iterable

from ray_operator.spec.fetch_addresses import parse_ip_literal

Origin = tuple[str, str, int]
"""(scheme, canonical host, port)."""

DEFAULT_PORTS = {"https": 443, "http": 80}
SCHEMELESS = "https"
"""What an entry without `scheme://` means."""


def origin_listed(entries: Iterable[str], origin: Origin) -> bool:
    """Whether one of `entries` names `origin` (scheme, canonical host, port)."""
    return any(parse_origin_entry(entry) == origin for entry in entries)


def parse_origin_entry(entry: str) -> Origin | None:
    """The origin `[scheme://]host[:port]` names, or None when the entry is malformed."""
    text = entry.strip()
    scheme, separator, rest = text.partition("://")
    if not separator:
        scheme, rest = SCHEMELESS, text
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        return None
    host_port = rest.removesuffix("/")  # `https://host/` is how people paste an origin
    parsed = _host_and_port(host_port, default_port=DEFAULT_PORTS[scheme])
    if parsed is None:
        return None
    host, port = parsed
    return scheme, host, port


def malformed_entries(entries: Iterable[str]) -> list[str]:
    """The entries that name no origin."""
    return [entry for entry in entries if parse_origin_entry(entry) is None]


def canonical_host(host: str) -> str:
    """A host as compared: an IP literal in its one spelling, a name in lower case without a
    trailing dot."""
    address = parse_ip_literal(host)
    return str(address) if address is not None else host.lower().rstrip(".")


def entry_for(origin: Origin) -> str:
    """The entry that lists `origin`: `host:port` for https, `http://host:port` for http."""
    scheme, host, port = origin
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return shown if scheme == SCHEMELESS else f"{scheme}://{shown}"


def _host_and_port(text: str, *, default_port: int) -> tuple[str, int] | None:
    """`host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address; None if malformed."""
    if not text or any(character in text for character in "/@?# \t"):
        return None
    if text.startswith("[") == text.endswith("]") and parse_ip_literal(text) is not None:
        return canonical_host(text), default_port
    if text.startswith("["):
        host, closing, rest = text[1:].partition("]")
        if not closing or parse_ip_literal(host) is None or (rest and not rest.startswith(":")):
            return None
        port_text = rest.removeprefix(":")
        if rest and not port_text:
            return None
    else:
        host, colon, port_text = text.partition(":")
        if colon and not port_text:
            return None
    if not host:
        return None
    if not port_text:
        return canonical_host(host), default_port
    if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        return None
    if not 0 < int(port_text) < 65536:
        return None
    return canonical_host(host), int(port_text)


__all__ = [
    "DEFAULT_PORTS",
    "Origin",
    "canonical_host",
    "entry_for",
    "malformed_entries",
    "origin_listed",
    "parse_origin_entry",
]
