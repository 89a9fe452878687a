"""What a RayServeGraph fetch takes and gives: the operator's `FetchPolicy`, one
`ArtifactRequest`, its outcomes (`Artifact`, `NotModified`) and `ArtifactFetchError`, which every
refusal is: the `Fetched` condition's `reason`, a fixed `message` a user can act on (no secret in
it) and whether a retry may help (`retryable`).

Pure values: the fetch itself is I/O (`servegraph.fetch`); the checks that need no network
(`fetch_urls`) and the controllers use these without pulling in aiohttp.
"""

from __future__ import annotations

import dataclasses
from typing import NoReturn


@dataclasses.dataclass(frozen=True)
class FetchPolicy:
    """Operator-wide limits on where documents may come from."""

    allowed_hosts: frozenset[str] = frozenset()
    """`[http://]host[:port]` entries (`origins`: without a scheme, https; port omitted: the
    scheme's default); empty: any host (`--serve-graph-allowed-hosts`). When set, connection
    failures are reported with their cause."""
    allow_loopback: bool = False
    """Fetch from 127.0.0.0/8 and ::1 (`--serve-graph-allow-loopback`; tests and `make run`)."""
    max_redirects: int = 5
    """Same-origin redirects followed before giving up."""
    max_concurrent_fetches: int = 8
    """Fetches under way at once across the operator (`Fetcher`); name lookups likewise."""
    max_concurrent_fetches_per_namespace: int = 2
    """Of those, how many one namespace may hold at once."""

    @property
    def shows_causes(self) -> bool:
        """Whether connection failures say what happened: only when the admin chose the hosts."""
        return bool(self.allowed_hosts)


@dataclasses.dataclass(frozen=True)
class ArtifactRequest:
    """One fetch, as the RayServeGraph's `spec.source` and its Secrets describe it."""

    url: str
    token: str | None = dataclasses.field(repr=False)
    ca_bundle: bytes | None
    """PEM; when set, the only certificates trusted (else the system's)."""
    etag: str | None
    """Sent as If-None-Match (the ETag of the document we hold)."""
    timeout_seconds: float
    """Deadline of the whole fetch: resolve, connect, TLS, redirects and body."""
    max_bytes: int
    allow_insecure_http: bool


@dataclasses.dataclass(frozen=True)
class Artifact:
    """A downloaded document."""

    body: bytes = dataclasses.field(repr=False)
    digest: str
    """`sha256:<hex>` of the body."""
    etag: str | None
    """The server's ETag, when it sent a short, printable one (it goes into the status)."""
    size: int
    url: str
    """Where the body came from (after same-origin redirects), without userinfo, query or
    fragment: safe to show."""


@dataclasses.dataclass(frozen=True)
class NotModified:
    """The server answered 304 to our If-None-Match: the document we hold is current."""

    etag: str | None


class ArtifactFetchError(Exception):
    """A fetch that did not produce a document. `str()` is the message; no secret in it."""

    def __init__(self, reason: str, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable

    def __repr__(self) -> str:
        return (
            f"ArtifactFetchError(reason={self.reason!r}, message={self.message!r}, "
            f"retryable={self.retryable!r})"
        )


def fail(reason: str, message: str, *, retryable: bool) -> NoReturn:
    """Raise the `ArtifactFetchError` of `reason` and `message`."""
    raise ArtifactFetchError(reason, message, retryable=retryable)
